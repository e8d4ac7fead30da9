package suggest

import "testing"

func TestClosest(t *testing.T) {
	keys := []string{"data_dir", "http_addr", "public_url", "nats_url", "nats_listen"}
	for _, tc := range []struct{ word, want string }{
		{"htp_addr", "http_addr"},
		{"http-addr", "http_addr"}, // the flag's spelling
		{"HTTP_ADDR", "http_addr"}, // case
		{"nats_urll", "nats_url"},  // one insertion
		{"listen", ""},             // too far from nats_listen to be a typo
		{"retention_days", ""},     // nothing near
		{"http_addr", ""},          // the word itself is no suggestion
	} {
		if got := Closest(tc.word, keys); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
	scopes := []string{"a2a:read", "a2a:delegate", "a2a:admin"}
	for word, want := range map[string]string{"a2a:delegat": "a2a:delegate", "a2a:raed": "a2a:read", "a2a:admn": "a2a:admin", "openid": ""} {
		if got := Closest(word, scopes); got != want {
			t.Errorf("Closest(%q) = %q, want %q", word, got, want)
		}
	}
}
