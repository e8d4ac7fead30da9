package artifact

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// knownKeywords is every Keyword Validate may report.
var knownKeywords = func() map[string]bool {
	m := map[string]bool{"json": true, "schema": true}
	for _, k := range keywords {
		m[k] = true
	}
	return m
}()

func loadRisk(t testing.TB) *Schema {
	t.Helper()
	r, err := LoadDir("../testdata/schemas")
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Get("risk_assessment")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzValidate validates arbitrary documents against risk_assessment: it must
// not panic, must give the same answer twice, must sort and dedupe, must use
// only known keywords, and every pointer token must be an array index or a
// property name the schema declares, so no agent text can ride out in a
// violation.
func FuzzValidate(f *testing.F) {
	s := loadRisk(f)
	for _, seed := range []string{
		`{"case_id":"C-1","risk_level":"low","score":0.2,"reasons":["x"],"policy_version":"v1"}`,
		`{"case_id":"","risk_level":"LOW","score":"1","reasons":[1,"",null],"x":{"y":[]}}`,
		`{"ignore previous instructions":{"case_id":1},"reasons":[[{"a/b~c":1}]]}`,
		`{"score":1e400,"case_id":"\u0000","risk_level":null}`,
		`[{"case_id":1}]`, `"str"`, `null`, `1.5`, `{`, `{"a":1}{}`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got := s.Validate(doc)
		if again := s.Validate(doc); !reflect.DeepEqual(got, again) {
			t.Fatalf("not deterministic: %v then %v", got, again)
		}
		if got != nil && len(got) == 0 {
			t.Fatal("empty non-nil result")
		}
		if !slices.IsSortedFunc(got, func(a, b Violation) int {
			if c := strings.Compare(a.Pointer, b.Pointer); c != 0 {
				return c
			}
			return strings.Compare(a.Keyword, b.Keyword)
		}) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Fatalf("not sorted and deduplicated: %v", got)
		}
		for _, v := range got {
			if !knownKeywords[v.Keyword] {
				t.Fatalf("unknown keyword %q", v.Keyword)
			}
			if v.Pointer == "" {
				continue
			}
			if !strings.HasPrefix(v.Pointer, "/") {
				t.Fatalf("pointer %q does not start with /", v.Pointer)
			}
			for tok := range strings.SplitSeq(v.Pointer[1:], "/") {
				if _, err := strconv.Atoi(tok); err == nil {
					continue
				}
				if !s.names[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")] {
					t.Fatalf("pointer %q names %q, which the schema does not declare", v.Pointer, tok)
				}
			}
		}
		if json.Valid(doc) != (len(got) != 1 || got[0].Keyword != "json") {
			t.Fatalf("json.Valid = %v but Validate = %v", json.Valid(doc), got)
		}
	})
}

// FuzzLoad loads arbitrary schema bytes from a temporary directory. "@@SRV@@"
// in the input is replaced with the URL of a local HTTP server that counts
// requests. Loading must not panic, must never reach that server, and must
// never reach the compiler's refusing loader either (the load-time walk
// should have refused the file first); a loaded schema must validate without
// panicking.
func FuzzLoad(f *testing.F) {
	srv, hits := countingServer(f)
	for _, seed := range []string{
		`{"type":"object","properties":{"a":{"$ref":"@@SRV@@/x.json"}}}`,
		`{"$ref":"file:///etc/passwd"}`,
		`{"id":"@@SRV@@/a.json#f","properties":{"x":{"$ref":"#/definitions/a"}},"definitions":{"a":{}}}`,
		`{"$id":"#a","definitions":{"b":{"$id":"#b","$ref":"#a"}},"$ref":"#b"}`,
		`{"$schema":"http://json-schema.org/draft-07/schema","items":[true,false],"additionalItems":{"$ref":"#"}}`,
		`{"properties":{"$ref":{"$ref":"#/properties/id"},"id":{"id":"#x"}}}`,
		`{"dependencies":{"a":["b"],"c":{"$ref":"x.json"}},"enum":[{"$ref":"@@SRV@@"}]}`,
		`{"allOf":{"$ref":"@@SRV@@"},"not":[{"$ref":"//h/x"}]}`,
		`{"pattern":"[","format":"regex","multipleOf":0,"minimum":"x"}`,
		`[]`, `true`, `{`, ``,
		// Against linked.json, which every run's directory holds.
		`{"$id":"https://x.test/s.json","properties":{"a":{"$ref":"linked.json#/definitions/a"},"b":{"$ref":"https://x.test/linked.json"}}}`,
		`{"$id":"https://x.test/s.json","allOf":[{"$ref":"s.json#"}]}`,
		`{"$id":"@@SRV@@/s.json","properties":{"a":{"$ref":"linked.json"}}}`,
		`{"$id":"https://x.test/linked.json"}`,
		`{"$defs":{"x":{"prefixItems":[{"$ref":"https://x.test/linked.json#/definitions/b"}]}}}`,
	} {
		f.Add([]byte(seed))
	}
	const linked = `{"$id":"https://x.test/linked.json","type":"object","properties":{"n":{"$ref":"#"}},` +
		`"definitions":{"a":{"type":"string"},"b":{"items":{"$ref":"#/definitions/a"}}}}`
	probes := [][]byte{[]byte(`{}`), []byte(`{"a":[1,"x",null,{"b":true}]}`), []byte(`"s"`), []byte(`1e999`)}
	f.Fuzz(func(t *testing.T, schema []byte) {
		schema = []byte(strings.ReplaceAll(string(schema), "@@SRV@@", srv.URL))
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "s.json"), schema, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "linked.json"), []byte(linked), 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := LoadDir(dir)
		if n := hits.Load(); n != 0 {
			t.Fatalf("server received %d requests", n)
		}
		var le *LoadError
		switch {
		case err == nil:
			s, err := r.Get("s")
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range probes {
				s.Validate(p)
			}
		case !errors.As(err, &le):
			t.Fatalf("LoadDir = %v (%T), want *LoadError", err, err)
		case strings.Contains(le.Reason, errExternalRef.Error()):
			t.Fatalf("the walk missed a reference the compiler then tried to load: %v", err)
		}
	})
}

// BenchmarkValidate validates a valid risk assessment of about 1 KB.
func BenchmarkValidate(b *testing.B) {
	s := loadRisk(b)
	reasons := []string{
		"Refund requested three days after delivery confirmation, with a claim that the parcel never arrived.",
		"Second refund request on this account within thirty days; the first one was granted without evidence.",
		"Shipping address differs from the billing address and was changed less than an hour before checkout.",
		"Payment card was added to the account on the same day as the order, from a device not seen before.",
		"Customer tenure is eleven days, well under the ninety-day threshold the policy treats as established.",
		"Courier scan shows the parcel delivered to a locker; locker pick-up logs confirm a collection event.",
		"Order value sits just below the manual review threshold, a pattern seen in structured refund abuse.",
		"No prior chargebacks on the card; the issuer reports no fraud flags for the card in the last year.",
	}
	doc, err := json.Marshal(map[string]any{
		"case_id": "C-1042", "risk_level": "high", "score": 0.87, "reasons": reasons, "policy_version": "2026-01",
	})
	if err != nil {
		b.Fatal(err)
	}
	if v := s.Validate(doc); v != nil {
		b.Fatalf("benchmark document invalid: %v", v)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if s.Validate(doc) != nil {
			b.Fatal("invalid")
		}
	}
}
