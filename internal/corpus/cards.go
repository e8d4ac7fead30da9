package corpus

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ServeJSSDKCard serves the card @a2a-js/sdk 1.3 publishes
// (testdata/cards/a2a-js-1.3-mixed.json, read from root, the module's
// directory relative to the test) on a loopback origin, its interfaces
// rewritten to that origin as the SDK would serve them there, and returns
// the origin. The server ends with the test.
func ServeJSSDKCard(t testing.TB, root string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "testdata", "cards", "a2a-js-1.3-mixed.json"))
	if err != nil {
		t.Fatal(err)
	}
	var card []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(card)
	}))
	t.Cleanup(srv.Close)
	card = []byte(strings.ReplaceAll(string(raw), "http://localhost:41241", srv.URL))
	return srv.URL
}
