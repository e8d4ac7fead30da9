package agentcard

import (
	"strconv"
	"strings"

	"github.com/a2ad/a2ad/internal/untrusted"
)

// Warning flags card text phrased as instructions to a model: where, and
// what kind of phrasing, never the text. Flagging is a backstop for an
// operator's review, not a boundary: card text always reaches hosts as
// data, never as instructions.
type Warning struct {
	// Pointer is an RFC 6901 JSON pointer into the card: "/name",
	// "/description", "/skills/0/id", "/skills/1/tags/2".
	Pointer string `json:"pointer"`
	// Kind is the kind of phrasing, one of "instruction_override",
	// "role_reassignment", "prompt_reference", "concealment", "role_tag",
	// "exfiltration" (untrusted.Kinds).
	Kind string `json:"kind"`
}

// InjectionWarnings scans the card's name and description and each skill's
// id, name, description, tags and examples with the scanner every agent
// string goes through (untrusted.Scan: case, zero-width and look-alike
// characters, and '_' or '-' between words do not hide a phrase; a skill
// id's '.' and '/' count as spaces too). It returns one Warning per
// matching field, in card order, or nil.
func InjectionWarnings(c *Card) []Warning {
	var out []Warning
	check := func(pointer, text string) {
		if kind, ok := untrusted.Scan(text); ok {
			out = append(out, Warning{Pointer: pointer, Kind: kind})
		}
	}
	check("/name", c.Name)
	check("/description", c.Description)
	for i, s := range c.Skills {
		p := "/skills/" + strconv.Itoa(i)
		check(p+"/id", idSeparators.Replace(s.ID))
		check(p+"/name", s.Name)
		check(p+"/description", s.Description)
		for j, t := range s.Tags {
			check(p+"/tags/"+strconv.Itoa(j), t)
		}
		for j, e := range s.Examples {
			check(p+"/examples/"+strconv.Itoa(j), e)
		}
	}
	return out
}

// idSeparators makes the separators of key-style ids spaces, as Scan does
// '_' and '-': in an id a '.' does not end a sentence
// ("ignore.previous.instructions").
var idSeparators = strings.NewReplacer(".", " ", "/", " ")
