package artifact

import (
	"encoding/json"
	"testing"
	"testing/fstest"
)

// What `format` guarantees with gojsonschema v1.2.0, as docs/host-schemas.md
// states it: each row is a value and whether the check passes. The loose
// rows are the point: a schema author must not rely on `format` for them.
func TestFormatChecksAreWhatTheDocsSay(t *testing.T) {
	for _, tc := range []struct {
		format, value string // value is JSON
		valid         bool
	}{
		{"date-time", `"2026-11-30T04:39:25Z"`, true},
		{"date-time", `"2026-11-30T04:39:25+01:00"`, true},
		{"date-time", `"2026-11-30"`, true},           // loose: a date alone passes
		{"date-time", `"04:39:25"`, true},             // loose: a time alone passes
		{"date-time", `"2026-11-30 04:39:25"`, false}, // a space instead of T
		{"date-time", `"2026-02-30T00:00:00Z"`, false},
		{"date", `"2026-11-30"`, true},
		{"email", `"ops@example.com"`, true},
		{"email", `"Ops <ops@example.com>"`, true}, // loose: a display name passes (net/mail)
		{"email", `"ops"`, false},
		{"uri", `"https://example.com/x"`, true},
		{"uri", `"javascript:alert(1)"`, true}, // any scheme passes
		{"uri", `"/relative"`, false},
		{"uuid", `"6ba7b810-9dad-11d1-80b4-00c04fd430c8"`, true},
		{"uuid", `"6ba7b810"`, false},
		{"uuid", `"6BA7B810-9DAD-11D1-80B4-00C04FD430C8"`, false}, // upper case fails, though RFC 4122 allows it
		{"ipv4", `"192.0.2.1"`, true},
		{"ipv4", `"::1"`, false},
		{"hostname", `"a2ad.example.com"`, true},
		{"hostname", `"a2ad example"`, false},
		{"regex", `"^[a-z]+$"`, true}, // Go RE2 syntax, not ECMA-262
		{"regex", `"(?<=a)b"`, false}, // look-behind: valid ECMA-262, not RE2
		{"email", `5`, false},         // not draft-07: format fails a non-string
	} {
		schema := `{"format":"` + tc.format + `"}`
		r, err := LoadFS(fstest.MapFS{"f.json": {Data: []byte(schema)}}, ".")
		if err != nil {
			t.Fatal(err)
		}
		s, _ := r.Get("f")
		got := len(s.Validate(json.RawMessage(tc.value))) == 0
		if got != tc.valid {
			t.Errorf("format %s, value %s: valid %v, want %v", tc.format, tc.value, got, tc.valid)
		}
	}
}
