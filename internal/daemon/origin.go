package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// originGuard answers 403 origin_not_allowed to a request whose Origin
// header (RFC 6454 §7) is present and not one of allowed, whatever its
// token: the MCP transport (2025-11-25, Streamable HTTP, "Security
// Warning") requires servers to validate Origin against DNS rebinding, and
// a2ad's admin API holds the same bearer tokens. Clients that are not
// browsers (the go-sdk, curl) send no Origin and pass.
func originGuard(allowed map[string]bool, refused func(reason string), h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		values := r.Header.Values("Origin")
		if len(values) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		if o, err := normalOrigin(values[0]); len(values) > 1 || err != nil || !allowed[o] {
			refused("origin_not_allowed")
			writeHTTPError(w, http.StatusForbidden, "origin_not_allowed",
				"requests from a web page are accepted only from a2ad's own origin (public_url) and http_allowed_origins; this Origin is neither")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// allowedOrigins are the origins of a2ad's listener and public URL and
// those configured (http_allowed_origins). A loopback listener is also
// its own origin under the other loopback names (localhost, 127.0.0.1,
// [::1], with its port): the names its Host check accepts, so that the
// console opened at http://localhost:PORT works as at 127.0.0.1:PORT.
func allowedOrigins(listener, public string, configured []string) map[string]bool {
	allowed := map[string]bool{}
	for _, base := range []string{listener, public} {
		if u, err := url.Parse(base); err == nil {
			configured = append(configured, u.Scheme+"://"+u.Host) // public_url may have a path
		}
	}
	if u, err := url.Parse(listener); err == nil {
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() {
			for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
				configured = append(configured, u.Scheme+"://"+net.JoinHostPort(name, u.Port()))
			}
		}
	}
	for _, o := range configured {
		if n, err := normalOrigin(o); err == nil {
			allowed[n] = true
		}
	}
	return allowed
}

// normalOrigin is an http(s) origin (scheme://host[:port], RFC 6454 §6.2)
// in lower case and without its scheme's default port; anything else
// (the opaque "null", a path, user information) is an error.
func normalOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("want an origin such as https://console.example.com (scheme, host, optional port)")
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		host = strings.TrimSuffix(host, ":"+p)
	}
	return strings.ToLower(u.Scheme) + "://" + host, nil
}

// checkOrigins refuses an http_allowed_origins entry that is not an origin.
func checkOrigins(list []string) error {
	for i, o := range list {
		if _, err := normalOrigin(o); err != nil {
			return fmt.Errorf("config: http_allowed_origins[%d] %q: %w", i, o, err)
		}
	}
	return nil
}

// writeHTTPError writes a2ad's JSON error body, as the admin API answers.
func writeHTTPError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": message}})
}
