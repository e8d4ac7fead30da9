package main

import (
	"log/slog"

	"github.com/a2ad/a2ad/internal/daemon"
)

// reloadNATSCertificate reads the embedded NATS server's certificate
// again (SIGHUP) and logs what it now presents; a refused reload keeps the
// previous one.
func reloadNATSCertificate(d *daemon.Daemon, log *slog.Logger) {
	leaf, err := d.ReloadNATSCertificate()
	switch {
	case err != nil:
		log.Error("NATS certificate not reloaded; the previous one stays in force", "err", err)
	case leaf != nil:
		log.Info("NATS certificate reloaded", "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter)
	}
}
