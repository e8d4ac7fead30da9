// Package corpus helps the tests that read a2ad's corpus of bad inputs
// (testdata/bad): each case file carries what a2ad must answer in an
// "expect" member, which the tests can record anew (A2AD_BAD_RECORD=1).
package corpus

import (
	"bytes"
	"encoding/json"
	"errors"
)

// SpliceExpect returns raw, a case file's JSON, with the value of its
// first "expect" member replaced by v (indented by two spaces, HTML not
// escaped) and every other byte as written.
func SpliceExpect(raw []byte, v any) ([]byte, error) {
	at := bytes.Index(raw, []byte(`"expect":`))
	if at < 0 {
		return nil, errors.New("no expect member")
	}
	start := at + len(`"expect":`)
	dec := json.NewDecoder(bytes.NewReader(raw[start:]))
	var old json.RawMessage
	if err := dec.Decode(&old); err != nil {
		return nil, err
	}
	end := start + int(dec.InputOffset())
	var val bytes.Buffer
	enc := json.NewEncoder(&val)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := append(append(append([]byte{}, raw[:start]...), ' '), bytes.TrimSpace(val.Bytes())...)
	return append(out, raw[end:]...), nil
}
