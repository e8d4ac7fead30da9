package agentcard

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/internal/corpus"
)

// badCard is one file of testdata/bad/cards: a card a2ad must refuse, and
// exactly how (see testdata/bad/README.md).
type badCard struct {
	Description string          `json:"description"`
	Card        json.RawMessage `json:"card"`
	Expect      badCardExpect   `json:"expect"`
}

type badCardExpect struct {
	// Faults are every fault of the refusal, pointer and reason.
	Faults []*ValidationError `json:"faults"`
	// Notes are what a2ad noticed besides (nil: none).
	Notes []Note `json:"notes,omitempty"`
	// Refusal is the agent's LastRefusal.Reason, what an operator sees.
	Refusal string `json:"refusal"`
}

// Every refused card of the corpus is refused with all its faults at once,
// the notes a2ad took besides, and a refusal reason in a2ad's own words
// that quotes no string of the card longer than 12 bytes.
// A2AD_BAD_RECORD=1 writes the observed outcome into each file's expect.
func TestBadCards(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "bad", "cards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var c badCard
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			_, notes, err := Check(c.Card)
			var ce *CardError
			if !errors.As(err, &ce) {
				t.Fatalf("Check = %v, want a *CardError", err)
			}
			reason, _ := RefusalReason(err)
			got := badCardExpect{Faults: ce.Faults, Notes: notes, Refusal: reason}
			if os.Getenv("A2AD_BAD_RECORD") != "" {
				recordExpect(t, f, raw, got)
				return
			}
			if !reflect.DeepEqual(got, c.Expect) {
				g, _ := json.MarshalIndent(got, "", "  ")
				t.Errorf("outcome\n%s\nwant the file's expect", g)
			}
			var card any
			_ = json.Unmarshal(c.Card, &card)
			for _, s := range cardStrings(card) {
				if len(s) > 12 && strings.Contains(reason, s) {
					t.Errorf("the refusal quotes the card: %q", s)
				}
			}
		})
	}
}

// cardStrings are every string of a decoded card, and its member names
// that are not plain identifiers (those, like supportedInterfaces, the
// reason may name in a pointer).
func cardStrings(v any) []string {
	var out []string
	switch t := v.(type) {
	case string:
		out = append(out, t)
	case []any:
		for _, e := range t {
			out = append(out, cardStrings(e)...)
		}
	case map[string]any:
		for k, e := range t {
			if !plainName(k) {
				out = append(out, k)
			}
			out = append(out, cardStrings(e)...)
		}
	}
	return out
}

// recordExpect splices got in place of the file's expect member.
func recordExpect(t *testing.T, path string, raw []byte, got badCardExpect) {
	out, err := corpus.SpliceExpect(raw, got)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
