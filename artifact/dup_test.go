package artifact

import "testing"

func TestDuplicateMember(t *testing.T) {
	for doc, want := range map[string]string{
		`{"a":1,"a":2}`:                           "",
		`{"a":{"b":1,"b":2}}`:                     "",
		`[{"x":1},{"y":1,"y":2}]`:                 "/1",
		`[[0],[1,{"k":[],"k":{}}]]`:               "/1/1",
		`{"a":[{"b":1}],"c":{"d":{"e":1,"e":1}}}`: "",
		`{"items":[{"sku":"a","sku":"b"}]}`:       "",
		`[{"items":[[{"k":1,"k":2}]]}]`:           "/0",
	} {
		got, ok := duplicateMember([]byte(doc))
		if !ok || got != want {
			t.Errorf("%s: %q %v, want %q true", doc, got, ok, want)
		}
	}
	for _, doc := range []string{`{}`, `[]`, `{"a":1,"b":{"a":1}}`, `[{"a":1},{"a":1}]`, `"s"`, `{"a":[{"a":1,"b":2}],"b":[]}`} {
		if ptr, ok := duplicateMember([]byte(doc)); ok {
			t.Errorf("%s: duplicate reported at %q", doc, ptr)
		}
	}
}
