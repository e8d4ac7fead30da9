package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/nats-io/nats.go/jetstream"
)

// streamConfig is the audit stream's configuration for cfg: limits
// retention, file storage, MaxAge and MaxBytes (defaults DefaultMaxAge and
// DefaultMaxBytes), discard old, replicas max(1, replicas), deletes and
// purges denied, a duplicate window on Nats-Msg-Id of 2 minutes (or
// MaxAge, if shorter), direct gets.
func streamConfig(cfg Config, replicas int) (jetstream.StreamConfig, error) {
	age := time.Duration(cfg.MaxAge)
	if age <= 0 {
		age = DefaultMaxAge
	}
	maxBytes := cfg.MaxBytes
	switch {
	case maxBytes == 0:
		maxBytes = DefaultMaxBytes
	case maxBytes < -1:
		return jetstream.StreamConfig{}, fmt.Errorf("audit: max_bytes %d: want a size in bytes, 0 (the default, %d) or -1 (no cap)", maxBytes, DefaultMaxBytes)
	}
	return jetstream.StreamConfig{
		Name:        Stream,
		Description: "a2ad audit trail: delegations, transitions, verdicts, agent approvals and refusals",
		Subjects:    []string{SubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      age,
		MaxBytes:    maxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    max(1, replicas),
		Duplicates:  min(2*time.Minute, age), // JetStream wants it within max_age
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
	}, nil
}

// Setting is one setting of the audit stream in which the stream differs
// from a2ad's configuration. Name is the field of the stream's
// configuration (max_age, max_bytes, replicas, discard, deny_delete,
// deny_purge); Have and Want are values as `nats stream edit` takes them
// (durations "2160h", bytes, "old", "true").
type Setting struct {
	Name, Have, Want string
}

func (s Setting) String() string { return s.Name + "=" + s.Have + " (configured " + s.Want + ")" }

// flag is the nats CLI flag that sets s to its Want.
func (s Setting) flag() string {
	name := "--" + strings.ReplaceAll(s.Name, "_", "-")
	switch s.Want {
	case "true":
		return name
	case "false":
		return "--no-" + name[2:]
	}
	return name + "=" + s.Want
}

// Settings are the settings in which a stream differs from the
// configuration.
type Settings []Setting

// String lists them: "max_age=1h (configured 2160h), …".
func (ss Settings) String() string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.String()
	}
	return strings.Join(out, ", ")
}

// Changes lists them as changes made: "max_age 1h → 2160h, …".
func (ss Settings) Changes() string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name + " " + s.Have + " → " + s.Want
	}
	return strings.Join(out, ", ")
}

// EditCommand is the nats CLI command with which an account administrator
// gives the audit stream the settings' Want values.
func (ss Settings) EditCommand() string {
	cmd := "nats stream edit " + Stream
	for _, s := range ss {
		cmd += " " + s.flag()
	}
	return cmd
}

// Diff lists the settings a2ad configures in which have differs from want:
// max_age, max_bytes, replicas, discard, deny_delete, deny_purge.
func Diff(have, want jetstream.StreamConfig) Settings {
	var out Settings
	add := func(name, h, w string) {
		if h != w {
			out = append(out, Setting{Name: name, Have: h, Want: w})
		}
	}
	add("max_age", durationText(have.MaxAge), durationText(want.MaxAge))
	add("max_bytes", strconv.FormatInt(have.MaxBytes, 10), strconv.FormatInt(want.MaxBytes, 10))
	add("replicas", strconv.Itoa(max(1, have.Replicas)), strconv.Itoa(max(1, want.Replicas)))
	add("discard", discardText(have.Discard), discardText(want.Discard))
	add("deny_delete", strconv.FormatBool(have.DenyDelete), strconv.FormatBool(want.DenyDelete))
	add("deny_purge", strconv.FormatBool(have.DenyPurge), strconv.FormatBool(want.DenyPurge))
	return out
}

// durationText is d as a Go duration without empty trailing units: 2160h,
// 1h30m, 90s.
func durationText(d time.Duration) string {
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = t[:len(t)-2]
	}
	if strings.HasSuffix(t, "h0m") {
		t = t[:len(t)-2]
	}
	return t
}

func discardText(p jetstream.DiscardPolicy) string {
	if p == jetstream.DiscardNew {
		return "new"
	}
	return "old"
}

// EnsureStream creates the audit stream with cfg's settings (see [Config])
// if it does not exist, and returns it with the settings in which an
// existing stream differs from cfg ([Diff]; none for a stream it created).
// It never changes an existing stream: a2ad's NATS user may create the
// stream but not update it (docs/nats-binding.md §10), so that whoever
// holds that user cannot shorten the trail's retention. JetStream refuses
// a create of an existing stream with another configuration, which
// EnsureStream then reads instead.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg Config, replicas int) (jetstream.Stream, Settings, error) {
	want, err := streamConfig(cfg, replicas)
	if err != nil {
		return nil, nil, err
	}
	var st jetstream.Stream
	var drift Settings
	err = jsretry.Do(ctx, time.Minute, func() (err error) {
		st, err = js.Stream(ctx, Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if st, err = js.CreateStream(ctx, want); err == nil || !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return err
			}
			st, err = js.Stream(ctx, Stream) // another instance created it first
		}
		if err == nil {
			drift = Diff(st.CachedInfo().Config, want)
		}
		return err
	})
	if err != nil {
		return nil, nil, streamErr(err, want)
	}
	return st, drift, nil
}

// ApplyStream gives the audit stream cfg's configuration, creating it if
// need be, and returns the settings it changed. It needs a connection
// allowed to update the stream, which a2ad's own user is not: on the
// embedded server a2ad calls it as embedded.AuditAdminUser at start.
func ApplyStream(ctx context.Context, js jetstream.JetStream, cfg Config, replicas int) (Settings, error) {
	_, drift, err := EnsureStream(ctx, js, cfg, replicas)
	if err != nil {
		return nil, err
	}
	want, _ := streamConfig(cfg, replicas)
	// The whole configuration, not only the settings Diff compares (an
	// update to the same configuration changes nothing).
	err = jsretry.Do(ctx, time.Minute, func() error {
		_, err := js.UpdateStream(ctx, want)
		return err
	})
	if err != nil {
		return nil, streamErr(err, want)
	}
	return drift, nil
}

// streamErr names the stream and, when JetStream has no room for the
// stream's byte cap, the setting to change.
func streamErr(err error, want jetstream.StreamConfig) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStorageResourcesExceeded {
		return fmt.Errorf("audit: stream %s: max_bytes %d does not fit in the JetStream store (set audit.max_bytes lower, or -1 for no cap, or raise the store's limit): %w", Stream, want.MaxBytes, err)
	}
	return fmt.Errorf("audit: stream %s: %w", Stream, err)
}

// jsErrStorageResourcesExceeded is JetStream's "insufficient storage
// resources available" (nats-server JSStorageResourcesExceededErr).
const jsErrStorageResourcesExceeded jetstream.ErrorCode = 10047
