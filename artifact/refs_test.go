package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/xeipuuv/gojsonschema"
)

// linkedSchemas is a schema directory whose schemas $ref each other by
// $id. The $ids are URLs of a live server that serves a schema accepting
// anything but a string, so a validator that fetched instead of resolving
// from the directory would give other verdicts, and the server counts it.
func linkedSchemas(base, postcode string) map[string]string {
	return map[string]string{
		"address.json": `{"$id":"` + base + `address.json","type":"object","required":["postcode"],` +
			`"properties":{"postcode":{"$ref":"#/definitions/postcode"},"city":{"type":"string"}},"additionalProperties":false,` +
			`"definitions":{"postcode":{"type":"string","pattern":"` + postcode + `"}}}`,
		"order.json": `{"$schema":"https://json-schema.org/draft-07/schema#","$id":"` + base + `order.json","type":"object",` +
			`"required":["id","shipping"],"properties":{"id":{"type":"string"},"shipping":{"$ref":"address.json"},` +
			`"billing_postcode":{"$ref":"` + base + `address.json#/definitions/postcode"}}}`,
		// No $id of its own: it can still name another schema by its
		// absolute $id.
		"parcel.json": `{"type":"object","properties":{"to":{"$ref":"` + base + `address.json"}}}`,
	}
}

// TestSchemaRefsAcrossFiles: schemas of one directory $ref each other by
// $id (absolute and relative to their own $id, with and without a
// fragment), resolved from the directory only: nothing is fetched, the
// referenced schema's constraints apply with their pointers, and a version
// covers every file it depends on.
func TestSchemaRefsAcrossFiles(t *testing.T) {
	srv, hits := countingServer(t)
	base := srv.URL + "/schemas/"
	r := registry(t, linkedSchemas(base, "^[0-9]{5}$"))
	order, _ := r.Get("order")
	parcel, _ := r.Get("parcel")
	address, _ := r.Get("address")
	type V = Violation
	for _, tc := range []struct {
		name string
		s    *Schema
		doc  string
		want []V
	}{
		{"valid", order, `{"id":"o1","shipping":{"postcode":"75001","city":"Paris"},"billing_postcode":"10115"}`, nil},
		{"referenced pattern", order, `{"id":"o1","shipping":{"postcode":"7500A"}}`, []V{{"/shipping/postcode", "pattern"}}},
		{"referenced required", order, `{"id":"o1","shipping":{"city":"Paris"}}`, []V{{"/shipping/postcode", "required"}}},
		{"referenced additionalProperties", order, `{"id":"o1","shipping":{"postcode":"75001","street":"x"}}`, []V{{"/shipping", "additionalProperties"}}},
		{"ref with fragment into another file", order, `{"id":"o1","shipping":{"postcode":"75001"},"billing_postcode":"10"}`, []V{{"/billing_postcode", "pattern"}}},
		{"schema without $id", parcel, `{"to":{"postcode":7}}`, []V{{"/to/postcode", "type"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.Validate(json.RawMessage(tc.doc)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Validate = %v, want %v", got, tc.want)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the server the $ids name; references must resolve from the directory", n)
	}

	// A schema that references none keeps the digest of its file; one
	// that does is versioned with what it references.
	sum := sha256.Sum256([]byte(linkedSchemas(base, "^[0-9]{5}$")["address.json"]))
	if want := "sha256:" + hex.EncodeToString(sum[:]); address.Digest != want {
		t.Errorf("address digest %s, want the file's %s", address.Digest, want)
	}
	r2 := registry(t, linkedSchemas(base, "^[0-9A-Z]{5}$"))
	order2, _ := r2.Get("order")
	if order2.Digest == order.Digest {
		t.Errorf("order.json is unchanged but address.json changed: the digest %s must change", order.Digest)
	}

	// The brief carries one self-contained document: the referenced
	// schemas are in its definitions with their $ids. gojsonschema with its
	// own (fetching) loader gives the same verdicts without a request.
	var doc map[string]any
	if err := json.Unmarshal(order.Document, &doc); err != nil {
		t.Fatal(err)
	}
	defs, _ := doc["definitions"].(map[string]any)
	if emb, _ := defs["a2ad:address"].(map[string]any); emb["$id"] != base+"address.json" {
		t.Fatalf("Document definitions = %v, want a2ad:address with $id %s", defs, base+"address.json")
	}
	standalone, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader(order.Document))
	if err != nil {
		t.Fatalf("the Document alone does not compile: %v", err)
	}
	res, err := standalone.Validate(gojsonschema.NewStringLoader(`{"id":"o1","shipping":{"postcode":"7500A"}}`))
	if err != nil || res.Valid() || len(res.Errors()) != 1 || !strings.Contains(res.Errors()[0].Field(), "shipping.postcode") {
		t.Fatalf("standalone Document: err %v, errors %v; want one error at shipping.postcode", err, res.Errors())
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the Document alone made %d requests: it is not self-contained", n)
	}
}

// TestCatalogKeepsReferencedVersions: a task delegated under order.json
// keeps the address.json it referenced then, after address.json changes,
// also in a new process reading the version back from the archive.
func TestCatalogKeepsReferencedVersions(t *testing.T) {
	base := "https://schemas.example.test/"
	archive := &memArchive{}
	c, err := NewCatalog(registry(t, linkedSchemas(base, "^[0-9]{5}$")), archive)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := c.Get("order")
	if _, err := c.Reload(registry(t, linkedSchemas(base, "^[0-9A-Z]{5}$"))); err != nil {
		t.Fatal(err)
	}
	restarted, err := NewCatalog(registry(t, linkedSchemas(base, "^[0-9A-Z]{5}$")), archive)
	if err != nil {
		t.Fatal(err)
	}
	current, _ := restarted.Get("order")
	doc := json.RawMessage(`{"id":"o1","shipping":{"postcode":"7500A"}}`)
	if got := current.Validate(doc); got != nil {
		t.Fatalf("current version: %v, want valid", got)
	}
	s, err := restarted.ForTask("order", old.Digest)
	if err != nil {
		t.Fatalf("ForTask(old digest): %v", err)
	}
	if s.Digest != old.Digest {
		t.Fatalf("ForTask gave digest %s, want %s", s.Digest, old.Digest)
	}
	if got, want := s.Validate(doc), []Violation{{"/shipping/postcode", "pattern"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("version delegated with: %v, want %v", got, want)
	}

	// The archived bundle is not JSON: an a2ad from before bundles, which
	// compiles an archived version as one schema file, refuses it instead
	// of validating against a schema that accepts anything.
	archived, _ := archive.Get(old.Digest)
	if !strings.HasPrefix(string(archived), bundleMagic) {
		t.Fatalf("archived bundle begins %.30q, want %q", archived, bundleMagic)
	}
	if _, err := loadFiles([]srcFile{{name: "order.json", b: archived}}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("the bundle read as a schema file: %v, want refused as not valid JSON", err)
	}
}

// Schemas may reference each other both ways, as long as each reference
// descends into the document: a tree of nodes whose children are another
// schema's nodes.
func TestSchemaRefsMutualRecursion(t *testing.T) {
	base := "https://schemas.example.test/"
	r := registry(t, map[string]string{
		"node.json": `{"$id":"` + base + `node.json","type":"object","required":["name"],"properties":{"name":{"type":"string"},` +
			`"children":{"type":"array","items":{"$ref":"tree.json"}}}}`,
		"tree.json": `{"$id":"` + base + `tree.json","type":"object","required":["root"],"properties":{"root":{"$ref":"node.json"}}}`,
	})
	tree, _ := r.Get("tree")
	doc := json.RawMessage(`{"root":{"name":"a","children":[{"root":{"name":"b","children":[{"root":{"name":7}}]}}]}}`)
	if got, want := tree.Validate(doc), []Violation{{"/root/children/0/root/children/0/root/name", "type"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Validate = %v, want %v", got, want)
	}
}
