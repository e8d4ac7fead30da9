package daemon

import (
	"net"
	"net/http"
	"slices"

	"github.com/a2ad/a2ad/internal/console"
	"github.com/a2ad/a2ad/mcpedge"
)

// consoleHandler is the web console (internal/console) over adminAPI,
// behind the same guards as /v1/: the Origin check, on a loopback
// listener the Host check, and the client certificate when one is
// required.
func (d *Daemon) consoleHandler(addr net.Addr, origins map[string]bool, adminAPI http.Handler) http.Handler {
	c := console.New(console.Options{Verify: d.verifyAdminToken, Admin: adminAPI})
	h := c.Handler()
	if d.Config.TLS.ClientCAFile != "" {
		h = requireClientCertificate(d.obs.httpRefused, h)
	}
	return originGuard(origins, d.obs.httpRefused, loopbackHostOnly(addr, h))
}

// verifyAdminToken is the console's login check: the admin API's own token
// verification (mcpedge.Authenticator.Verify) and scope a2a:admin.
func (d *Daemon) verifyAdminToken(tok string) (console.Identity, error) {
	ti, err := d.Auth.Verify(tok)
	if err != nil {
		d.obs.httpRefused("invalid_token")
		return console.Identity{}, err
	}
	p, ok := mcpedge.PrincipalOf(ti)
	if !ok || !slices.Contains(ti.Scopes, mcpedge.ScopeAdmin) {
		d.obs.httpRefused("insufficient_scope")
		return console.Identity{}, console.ErrNotAdmin
	}
	return console.Identity{Subject: p.Subject, Tenant: p.Tenant, Expires: ti.Expiration}, nil
}
