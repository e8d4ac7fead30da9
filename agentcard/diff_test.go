package agentcard

import (
	"slices"
	"testing"
)

func TestChanges(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want []string
	}{
		{`{"a":1,"b":[1,2]}`, `{"a":1,"b":[1,2]}`, nil},
		{`{"a":1,"b":[1,2]}`, `{"a":2,"b":[1,2,3],"c/d~":true}`, []string{"/a", "/b/2", "/c~1d~0"}},
		{`{"s":[{"id":"x","n":"a"}]}`, `{"s":[{"id":"x","n":"b"}]}`, []string{"/s/0/n"}},
		{`{"a":{"b":1}}`, `{"a":[1]}`, []string{"/a"}},
		{`{`, `{}`, []string{""}},
	} {
		if got := Changes([]byte(c.a), []byte(c.b)); !slices.Equal(got, c.want) {
			t.Errorf("Changes(%s, %s) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}
