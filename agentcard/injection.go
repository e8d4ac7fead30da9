package agentcard

import (
	"fmt"

	"github.com/a2ad/a2ad/internal/untrusted"
)

// injectionPatterns are phrasings that address a model rather than describe
// an agent: attempts to override a host's instructions through card text.
// Matching is a backstop that flags an agent for an operator's eyes, not a
// boundary: card text always reaches hosts as data, never as instructions.
var injectionPatterns = untrusted.CorePatterns()

// Warning is one finding of InjectionWarnings: where, and the phrase that
// matched (at most 80 bytes of it).
type Warning struct {
	Field  string `json:"field"`
	Phrase string `json:"phrase"`
}

func (w Warning) String() string { return fmt.Sprintf("%s: %q", w.Field, w.Phrase) }

// InjectionWarnings scans the card's free text (name, description, each
// skill's name, description, tags and examples) for imperative-override
// phrasing and returns one warning per matching field, in card order.
func InjectionWarnings(c *Card) []Warning {
	var out []Warning
	check := func(field, text string) {
		for _, re := range injectionPatterns {
			if m := re.FindString(text); m != "" {
				out = append(out, Warning{Field: field, Phrase: truncate(m, 80)})
				return
			}
		}
	}
	check("/name", c.Name)
	check("/description", c.Description)
	for i, s := range c.Skills {
		p := fmt.Sprintf("/skills/%d", i)
		check(p+"/name", s.Name)
		check(p+"/description", s.Description)
		for j, t := range s.Tags {
			check(fmt.Sprintf("%s/tags/%d", p, j), t)
		}
		for j, e := range s.Examples {
			check(fmt.Sprintf("%s/examples/%d", p, j), e)
		}
	}
	return out
}
