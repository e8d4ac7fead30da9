package brief

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// CheckEvidenceSize refuses evidence larger than lim's MaxEvidenceBytes
// (default 64 KiB) with the same *Error as [Build]: applied before an
// [Allowlist] filters, so that what is dropped is bounded too.
func CheckEvidenceSize(evidence json.RawMessage, lim Limits) error {
	lim = lim.WithDefaults()
	if len(bytes.TrimSpace(evidence)) > lim.MaxEvidenceBytes {
		return &Error{Field: "/evidence", Reason: fmt.Sprintf("larger than %d bytes", lim.MaxEvidenceBytes)}
	}
	return nil
}

// MaxDroppedReported bounds the dropped pointers [Allowlist.Filter]
// reports; beyond it the last entry says how many more were dropped.
const MaxDroppedReported = 100

// An Allowlist names the evidence an agent (and skill) may receive, as RFC
// 6901 JSON pointers into the evidence object: "/case_id" keeps that member
// whole, "/customer/tenure_days" keeps only that member of "customer", and
// a "*" token matches any member or array element ("/items/*/sku"). A bare
// name without a leading "/" means a top-level member ("case_id" is
// "/case_id"). Everything else is dropped before the brief is built.
type Allowlist struct {
	paths [][]string
}

// NewAllowlist parses entries. Errors name the entry at fault: an empty one,
// or a pointer with a bad escape (RFC 6901 §3 allows only ~0 and ~1).
func NewAllowlist(entries []string) (*Allowlist, error) {
	a := &Allowlist{}
	for _, e := range entries {
		if e == "" || e == "/" {
			return nil, fmt.Errorf("brief: evidence allowlist entry %q: empty", e)
		}
		if !strings.HasPrefix(e, "/") {
			e = "/" + strings.ReplaceAll(strings.ReplaceAll(e, "~", "~0"), "/", "~1")
		}
		var toks []string
		for _, t := range strings.Split(e[1:], "/") {
			u, err := unescapeToken(t)
			if err != nil {
				return nil, fmt.Errorf("brief: evidence allowlist entry %q: %w", e, err)
			}
			toks = append(toks, u)
		}
		a.paths = append(a.paths, toks)
	}
	return a, nil
}

func unescapeToken(t string) (string, error) {
	for i := 0; i < len(t); i++ {
		if t[i] == '~' && (i+1 == len(t) || (t[i+1] != '0' && t[i+1] != '1')) {
			return "", fmt.Errorf("bad escape at byte %d (only ~0 and ~1)", i)
		}
	}
	return strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~"), nil
}

func escapeToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}

// Filter returns evidence with only the allowed members, and the JSON
// pointers of the members it dropped, sorted (they are the host's own keys:
// the host is told which ones did not go out). A nil Allowlist allows
// everything. Evidence must be a JSON object (else *Error on /evidence);
// numbers keep their exact text.
func (a *Allowlist) Filter(evidence json.RawMessage) (json.RawMessage, []string, error) {
	if a == nil {
		return evidence, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(evidence))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, &Error{Field: "/evidence", Reason: "not valid JSON"}
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, nil, &Error{Field: "/evidence", Reason: "must be a JSON object"}
	}
	var dropped []string
	kept, _ := a.keep(doc, "", a.paths, &dropped)
	out, err := json.Marshal(kept)
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(dropped)
	if len(dropped) > MaxDroppedReported {
		dropped = append(dropped[:MaxDroppedReported:MaxDroppedReported], fmt.Sprintf("… and %d more", len(dropped)-MaxDroppedReported))
	}
	return out, dropped, nil
}

// keep filters v at pointer ptr, given the remaining tokens of every path
// that reaches it; a path with no tokens left allows v whole. It reports
// false (and records ptr as dropped) for a scalar that paths only pass
// through: "/customer/tenure_days" does not allow "customer": "…".
func (a *Allowlist) keep(v any, ptr string, paths [][]string, dropped *[]string) (any, bool) {
	for _, p := range paths {
		if len(p) == 0 {
			return v, true
		}
	}
	next := func(tok string) [][]string {
		var out [][]string
		for _, p := range paths {
			if p[0] == tok || p[0] == "*" {
				out = append(out, p[1:])
			}
		}
		return out
	}
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, child := range t {
			cp := ptr + "/" + escapeToken(k)
			if _, secret := FindSecretInText(k); secret {
				cp = ptr + "/*" // a member name that is a credential is not repeated, even to the host
			}
			if n := next(k); len(n) > 0 {
				if kv, ok := a.keep(child, cp, n, dropped); ok {
					out[k] = kv
				}
			} else {
				*dropped = append(*dropped, cp)
			}
		}
		return out, true
	case []any:
		out := make([]any, 0, len(t))
		for i, child := range t {
			cp := ptr + "/" + strconv.Itoa(i)
			if n := next(strconv.Itoa(i)); len(n) > 0 {
				if kv, ok := a.keep(child, cp, n, dropped); ok {
					out = append(out, kv)
				}
			} else {
				*dropped = append(*dropped, cp)
			}
		}
		return out, true
	default:
		*dropped = append(*dropped, ptr)
		return nil, false
	}
}
