package agentcard

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// maxChanges bounds the pointers Changes reports.
const maxChanges = 50

// Changes returns the JSON pointers (RFC 6901) at which two JSON documents
// differ, in document order: a member or element present in one only, or a
// value that differs (reported at the deepest level both share). Invalid
// JSON on either side is reported as a change of the whole document ("").
// At most 50 pointers are returned.
func Changes(before, after []byte) []string {
	var a, b any
	if json.Unmarshal(before, &a) != nil || json.Unmarshal(after, &b) != nil {
		return []string{""}
	}
	var out []string
	diff("", a, b, &out)
	return out
}

func diff(ptr string, a, b any, out *[]string) {
	if len(*out) >= maxChanges {
		return
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			*out = append(*out, ptr)
			return
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, dup := av[k]; !dup {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := ptr + "/" + escape(k)
			x, inA := av[k]
			y, inB := bv[k]
			if !inA || !inB {
				if len(*out) < maxChanges {
					*out = append(*out, p)
				}
				continue
			}
			diff(p, x, y, out)
		}
	case []any:
		bv, ok := b.([]any)
		if !ok {
			*out = append(*out, ptr)
			return
		}
		for i := range max(len(av), len(bv)) {
			p := ptr + "/" + strconv.Itoa(i)
			if i >= len(av) || i >= len(bv) {
				if len(*out) < maxChanges {
					*out = append(*out, p)
				}
				continue
			}
			diff(p, av[i], bv[i], out)
		}
	default:
		if a != b {
			*out = append(*out, ptr)
		}
	}
}

// escape encodes a member name as a JSON pointer token (RFC 6901 §3).
func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }
