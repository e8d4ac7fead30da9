package brief

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestAllowlistFilter(t *testing.T) {
	evidence := `{"case_id":"C-7","amount_cents":1999.50,"customer":{"tenure_days":400,"email":"a@example.com","notes":["x"]},
		"items":[{"sku":"A","price":1},{"sku":"B","price":2}],"a/b":1,"internal_memo":"do not send","customer_tier":"gold"}`
	for name, tc := range map[string]struct {
		allow   []string
		want    string
		dropped []string
	}{
		"top-level names": {[]string{"case_id", "amount_cents"}, `{"amount_cents":1999.50,"case_id":"C-7"}`,
			[]string{"/a~1b", "/customer", "/customer_tier", "/internal_memo", "/items"}},
		"nested pointer keeps only that member": {[]string{"/case_id", "/customer/tenure_days"},
			`{"case_id":"C-7","customer":{"tenure_days":400}}`,
			[]string{"/amount_cents", "/a~1b", "/customer/email", "/customer/notes", "/customer_tier", "/internal_memo", "/items"}},
		"wildcard over array elements": {[]string{"/items/*/sku"}, `{"items":[{"sku":"A"},{"sku":"B"}]}`,
			[]string{"/amount_cents", "/a~1b", "/case_id", "/customer", "/customer_tier", "/internal_memo", "/items/0/price", "/items/1/price"}},
		"escaped key": {[]string{"/a~1b", "a/b"}, `{"a/b":1}`,
			[]string{"/amount_cents", "/case_id", "/customer", "/customer_tier", "/internal_memo", "/items"}},
		"a path through a scalar keeps nothing of it": {[]string{"/case_id/x"}, `{}`,
			[]string{"/amount_cents", "/a~1b", "/case_id", "/customer", "/customer_tier", "/internal_memo", "/items"}},
	} {
		a, err := NewAllowlist(tc.allow)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, dropped, err := a.Filter(json.RawMessage(evidence))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var g, w any
		_ = json.Unmarshal(got, &g)
		_ = json.Unmarshal([]byte(tc.want), &w)
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if string(gb) != string(wb) {
			t.Errorf("%s: kept %s, want %s", name, got, tc.want)
		}
		if !slices.Equal(dropped, tc.dropped) {
			t.Errorf("%s: dropped %q, want %q", name, dropped, tc.dropped)
		}
	}
	// Numbers keep their exact text.
	a, _ := NewAllowlist([]string{"amount_cents"})
	got, _, _ := a.Filter(json.RawMessage(`{"amount_cents":1999.50}`))
	if string(got) != `{"amount_cents":1999.50}` {
		t.Errorf("number text changed: %s", got)
	}
	// A nil allowlist allows everything, as given.
	var none *Allowlist
	if got, dropped, err := none.Filter(json.RawMessage(evidence)); string(got) != evidence || dropped != nil || err != nil {
		t.Errorf("nil allowlist: %s %v %v", got, dropped, err)
	}
}

func TestAllowlistRefuses(t *testing.T) {
	for _, e := range [][]string{{""}, {"/"}, {"/a~2"}, {"/a~"}} {
		if _, err := NewAllowlist(e); err == nil {
			t.Errorf("NewAllowlist(%q) succeeded", e)
		}
	}
	a, _ := NewAllowlist([]string{"x"})
	for _, ev := range []string{`[1]`, `"s"`, `{`} {
		if _, _, err := a.Filter(json.RawMessage(ev)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Filter(%s): %v, want ErrInvalid", ev, err)
		}
	}
}

// A dropped member whose name is a credential is reported as "*", and the
// report is bounded.
func TestAllowlistReportsSafely(t *testing.T) {
	a, _ := NewAllowlist([]string{"case_id"})
	jwt := "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + "." + "eyJzdWIiOiIxIn0" + "." + "c2lnbmF0dXJlLXNpZ25hdHVyZQ"
	_, dropped, err := a.Filter(json.RawMessage(`{"case_id":"C-1","meta":{"` + jwt + `":1},"` + jwt + `":"x"}`))
	if err != nil || !slices.Equal(dropped, []string{"/*", "/meta"}) {
		t.Errorf("dropped %q %v, want [/* /meta]", dropped, err)
	}
	var b strings.Builder
	b.WriteString(`{"case_id":"C-1"`)
	for i := range 150 {
		fmt.Fprintf(&b, `,"k%03d":1`, i)
	}
	b.WriteString("}")
	_, dropped, _ = a.Filter(json.RawMessage(b.String()))
	if len(dropped) != MaxDroppedReported+1 || dropped[MaxDroppedReported] != "… and 50 more" || dropped[0] != "/k000" {
		t.Errorf("%d dropped reported, last %q", len(dropped), dropped[len(dropped)-1])
	}
	if err := CheckEvidenceSize(json.RawMessage(`{"a":"`+strings.Repeat("x", 70000)+`"}`), Limits{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("CheckEvidenceSize: %v", err)
	}
}
