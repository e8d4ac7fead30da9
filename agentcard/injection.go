package agentcard

import (
	"fmt"
	"regexp"
)

// injectionPatterns are phrasings that address a model rather than describe
// an agent: attempts to override a host's instructions through card text.
// Matching is a backstop that flags an agent for an operator's eyes, not a
// boundary: card text always reaches hosts as data, never as instructions.
var injectionPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(ignore|disregard|forget)\s+(all\s+|any\s+|the\s+|your\s+)*(previous|prior|above|earlier|preceding|system|original)\s+(instructions|prompts?|messages|rules|context)`),
	regexp.MustCompile(`(?i)\b(override|bypass)\s+(your|the|all|any)\s+(instructions|rules|guardrails|policies|safety)`),
	regexp.MustCompile(`(?i)\byou\s+are\s+now\b`),
	regexp.MustCompile(`(?i)\b(system|developer)\s+(prompt|message)\b`),
	regexp.MustCompile(`(?i)\bnew\s+instructions\s*:`),
	regexp.MustCompile(`(?i)\b(do\s+not|don'?t)\s+(tell|inform|show)\s+(the\s+)?(user|human|operator)`),
	regexp.MustCompile(`(?i)</?\s*(system|assistant|user|instructions?)\s*>`),
}

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
