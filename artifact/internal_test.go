package artifact

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/xeipuuv/gojsonschema"
)

// countingServer serves a valid schema at every path and counts requests.
func countingServer(t testing.TB) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/schema+json")
		w.Write([]byte(`{"type":"string"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// TestNoExternalLoad checks both layers: the load-time walk refuses remote
// and file references (with the pointer of the key), and the compiler's
// loader, reached directly here, refuses them too. The server serves a valid
// schema and the file holds one, so a compile that fetched either would
// succeed.
func TestNoExternalLoad(t *testing.T) {
	srv, hits := countingServer(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "target.json")
	if err := os.WriteFile(local, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, ref string }{
		{"http", srv.URL + "/x.json"},
		{"http with fragment", srv.URL + "/x.json#/definitions/a"},
		{"etc passwd", "file:///etc/passwd"},
		{"readable schema file", "file://" + filepath.ToSlash(local)},
	} {
		schema := `{"type":"object","properties":{"x":{"$ref":"` + tc.ref + `"}}}`
		t.Run(tc.name+"/LoadDir", func(t *testing.T) {
			d := t.TempDir()
			if err := os.WriteFile(filepath.Join(d, "s.json"), []byte(schema), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadDir(d)
			var le *LoadError
			if !errors.As(err, &le) || le.File != "s.json" || le.Pointer != "/properties/x/$ref" ||
				!strings.Contains(le.Reason, "$ref refused") {
				t.Fatalf("LoadDir = %v, want LoadError at /properties/x/$ref", err)
			}
		})
		t.Run(tc.name+"/compiler loader", func(t *testing.T) {
			_, err := compileGo([]byte(schema), nil)
			if !errors.Is(err, errExternalRef) {
				t.Fatalf("compileGo = %v, want errExternalRef", err)
			}
		})
	}
	// A base URI changed by a draft-04 style id makes even a fragment $ref
	// resolve against it: the loader still refuses.
	t.Run("id rebases a fragment ref", func(t *testing.T) {
		_, err := compileGo([]byte(`{"id":"`+srv.URL+`/a.json#f","properties":{"x":{"$ref":"#/definitions/a"}},"definitions":{"a":{}}}`), nil)
		if !errors.Is(err, errExternalRef) {
			t.Fatalf("compileGo = %v, want errExternalRef", err)
		}
	})
	if n := hits.Load(); n != 0 {
		t.Fatalf("httptest server received %d requests, want 0", n)
	}
}

// TestDefaultLoaderWouldFetch shows what the refusing loader prevents:
// gojsonschema's own loader fetches a remote $ref at compile time.
func TestDefaultLoaderWouldFetch(t *testing.T) {
	srv, hits := countingServer(t)
	_, err := gojsonschema.NewSchema(gojsonschema.NewStringLoader(`{"$ref":"` + srv.URL + `/x.json"}`))
	if err != nil {
		t.Fatalf("default loader: %v", err)
	}
	if hits.Load() == 0 {
		t.Fatal("default loader did not fetch; the refusal tests prove nothing")
	}
}

// TestJSONContextShape pins the gojsonschema internals contextTokens reads.
func TestJSONContextShape(t *testing.T) {
	if !jsonContextShape {
		t.Fatal("gojsonschema.JsonContext changed shape; contextTokens falls back to splitting on NUL")
	}
	ctx := gojsonschema.NewJsonContext("a.b/c", gojsonschema.NewJsonContext("0", gojsonschema.NewJsonContext("(root)", nil)))
	if got, want := contextTokens(ctx), []string{"(root)", "0", "a.b/c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("contextTokens = %q, want %q", got, want)
	}
	if got := contextTokens(nil); got != nil {
		t.Fatalf("contextTokens(nil) = %q", got)
	}
}

// TestKeywordMap checks that every error type gojsonschema v1.2.0 emits
// (errors.go, newError) maps to a keyword, and that unknown types give
// "schema".
func TestKeywordMap(t *testing.T) {
	for _, typ := range []string{
		"false", "required", "invalid_type", "number_any_of", "number_one_of", "number_all_of", "number_not",
		"missing_dependency", "internal", "const", "enum", "array_no_additional_items", "array_min_items",
		"array_max_items", "unique", "contains", "array_min_properties", "array_max_properties",
		"additional_property_not_allowed", "invalid_property_pattern", "invalid_property_name", "string_gte",
		"string_lte", "pattern", "format", "multiple_of", "number_gte", "number_gt", "number_lte", "number_lt",
		"condition_then", "condition_else",
	} {
		if _, ok := keywords[typ]; !ok {
			t.Errorf("type %q not mapped", typ)
		}
	}
	if k := keyword("something_new"); k != "schema" {
		t.Errorf("keyword(unknown) = %q, want schema", k)
	}
}

func TestEscapeToken(t *testing.T) {
	for in, want := range map[string]string{"": "", "a": "a", "a/b": "a~1b", "~": "~0", "~/": "~0~1", "~1": "~01"} {
		if got := escapeToken(in); got != want {
			t.Errorf("escapeToken(%q) = %q, want %q", in, got, want)
		}
	}
}
