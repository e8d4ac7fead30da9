package untrusted

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// A Finding is injection phrasing [Walk] found in a JSON document: where,
// and its kind (see [Kinds]); never the text itself.
type Finding struct {
	// Pointer is an RFC 6901 JSON pointer into the document ("" is the
	// root) whose tokens are only array indexes and declared property
	// names; see [Walk].
	Pointer string `json:"pointer"`
	Kind    string `json:"kind"`
}

// Walk scans, with [Scan], every string value and every object key of doc,
// a JSON value as encoding/json decodes it into an any (map[string]any,
// []any, string, float64 or json.Number, bool, nil; other types are
// skipped), and returns the findings sorted by Pointer then Kind, without
// duplicates; nil if there is none.
//
// declared says which object keys are the caller's own names (the property
// names a host schema declares); nil declares none. A value under a declared
// key is reported at its own pointer, e.g. "/reasons/3". A key that is not
// declared is agent text: it is never put in a pointer, so a finding in it,
// or anywhere in the value under it, is reported at the object that holds
// it. A declared key is the caller's text and is not scanned.
func Walk(doc any, declared func(name string) bool) []Finding {
	w := walker{declared: declared}
	w.value(doc, false)
	if len(w.found) == 0 {
		return nil
	}
	slices.SortFunc(w.found, func(a, b Finding) int {
		return cmp.Or(strings.Compare(a.Pointer, b.Pointer), strings.Compare(a.Kind, b.Kind))
	})
	return slices.Compact(w.found)
}

type walker struct {
	declared func(string) bool
	path     []token // the tokens of the current pointer, as far as it may go
	found    []Finding
}

// token is one pointer token: a property name, or an array index when name
// is "" and index >= 0.
type token struct {
	name  string
	index int
}

// value scans v; cut is true below an undeclared key, where the path no
// longer grows.
func (w *walker) value(v any, cut bool) {
	switch v := v.(type) {
	case string:
		w.scan(v)
	case []any:
		for i, e := range v {
			if cut {
				w.value(e, true)
				continue
			}
			w.path = append(w.path, token{index: i})
			w.value(e, false)
			w.path = w.path[:len(w.path)-1]
		}
	case map[string]any:
		for k, e := range v {
			if cut || w.declared == nil || !w.declared(k) {
				w.scan(k)
				w.value(e, true)
				continue
			}
			w.path = append(w.path, token{name: k, index: -1})
			w.value(e, false)
			w.path = w.path[:len(w.path)-1]
		}
	}
}

func (w *walker) scan(s string) {
	if kind, ok := Scan(s); ok {
		w.found = append(w.found, Finding{Pointer: w.pointer(), Kind: kind})
	}
}

func (w *walker) pointer() string {
	var b strings.Builder
	for _, t := range w.path {
		b.WriteByte('/')
		if t.index >= 0 {
			b.WriteString(strconv.Itoa(t.index))
			continue
		}
		b.WriteString(escapeToken(t.name))
	}
	return b.String()
}

// escapeToken escapes one RFC 6901 reference token: "~" becomes "~0" and
// "/" becomes "~1".
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
