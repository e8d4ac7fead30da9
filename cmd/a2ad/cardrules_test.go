package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// bindingDoc is the binding document agent authors read.
const bindingDoc = "../../docs/nats-binding.md"

// docSection returns the text of the section of docs/nats-binding.md
// whose heading starts with heading, up to the next heading of that level.
func docSection(t *testing.T, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(bindingDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		t.Fatalf("%s has no section %q", bindingDoc, heading)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	rest := doc[i+1+len(heading):]
	if j := strings.Index(rest, "\n"+level); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// docCards returns every ```json block of docs/nats-binding.md that is an
// agent card (an object with skills and supportedInterfaces), with the
// heading of the section it is in.
func docCards(t *testing.T) map[string][]byte {
	t.Helper()
	raw, err := os.ReadFile(bindingDoc)
	if err != nil {
		t.Fatal(err)
	}
	cards := map[string][]byte{}
	heading := ""
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			heading = strings.TrimLeft(lines[i], "# ")
		}
		if strings.TrimSpace(lines[i]) != "```json" {
			continue
		}
		var block []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			block = append(block, lines[i])
		}
		b := []byte(strings.Join(block, "\n") + "\n")
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) == nil && m["skills"] != nil && m["supportedInterfaces"] != nil {
			cards[fmt.Sprintf("%s (line %d)", heading, i-len(block))] = b
		}
	}
	return cards
}

// Every card docs/nats-binding.md shows passes the real binary's `a2ad
// agents check-card` with no fault, no note and no warning, and is
// delegable as the agent its interface names: the §3.3 example and §14's
// minimal card.
func TestDocCardsPassCheckCard(t *testing.T) {
	cards := docCards(t)
	if len(cards) < 2 {
		t.Fatalf("%d cards in %s, want at least 2 (§3.3 and §14): %v", len(cards), bindingDoc, cards)
	}
	agentOf := regexp.MustCompile(`"url": "nats://[^/"]+/a2a\.agent\.([A-Za-z0-9_-]+)"`)
	for where, card := range cards {
		m := agentOf.FindSubmatch(card)
		if m == nil {
			t.Errorf("%s: no NATS interface URL", where)
			continue
		}
		out, code := runCheckCard(t, card, "-", "--agent", string(m[1]))
		if code != 0 || !strings.Contains(out, "\ndelegable as agent "+string(m[1])+" once approved\n") ||
			!strings.HasSuffix(out, "\naccepted: 0 notes, 0 warnings\n") {
			t.Errorf("%s: exit %d,\n%s\nwant accepted, delegable, with 0 notes and 0 warnings", where, code, out)
		}
	}
}

// The card an agent author wrote from §3.3's first words, without
// description, version and skills, is refused with the three faults at
// once, one line each, in a2a.proto field order.
func TestCheckCardListsEveryFaultOfAHalfCard(t *testing.T) {
	card := []byte(`{
  "name": "Fraud Review Agent",
  "supportedInterfaces": [
    {"url": "nats://127.0.0.1:4222/a2a.agent.fraud-review", "protocolBinding": "urn:a2ad:binding:nats:v1", "protocolVersion": "1.0"}
  ],
  "capabilities": {},
  "defaultInputModes": ["application/json"],
  "defaultOutputModes": ["application/json"]
}`)
	out, code := runCheckCard(t, card, "-")
	want := `card: - (A2A 1.0 shape)
fault: /description: required
fault: /version: required
fault: /skills: required
refused: 3 faults, 0 notes
`
	if out != want || code != 1 {
		t.Errorf("exit %d, output\n%s\nwant exit 1,\n%s", code, out, want)
	}
}

// refusalRow is one row of §14's table of refusals.
type refusalRow struct {
	change, fault string
}

// refusalRows parses §14's refusal table: rows of "| `change` | `fault` |
// why |".
func refusalRows(t *testing.T, section string) []refusalRow {
	t.Helper()
	row := regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]+)` \\|")
	var rows []refusalRow
	for _, line := range strings.Split(section, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			rows = append(rows, refusalRow{change: m[1], fault: m[2]})
		}
	}
	return rows
}

// minimalCard returns §14's minimal card, the one ```json block there.
func minimalCard(t *testing.T, section string) []byte {
	t.Helper()
	_, rest, ok := strings.Cut(section, "```json\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("§14 has no ```json block")
	}
	return []byte(block)
}

// Every refusal §14's table lists is true: the change it names, made to
// §14's minimal card, makes the real binary's `a2ad agents check-card`
// refuse the card with that one fault line and no note (pointer and reason; " N " in a
// reason stands for a number).
func TestDocRefusalTableIsTrue(t *testing.T) {
	section := docSection(t, "## 14. ")
	base := minimalCard(t, section)
	rows := refusalRows(t, section)
	if len(rows) < 30 {
		t.Fatalf("%d rows in §14's refusal table, want every refusal (30 or more)", len(rows))
	}
	for _, r := range rows {
		t.Run(r.change, func(t *testing.T) {
			var card any
			if err := json.Unmarshal(base, &card); err != nil {
				t.Fatal(err)
			}
			for _, op := range strings.Split(r.change, "; ") {
				card = applyChange(t, card, op)
			}
			b, _ := json.Marshal(card)
			out, code := runCheckCard(t, b, "-")
			want := "^fault: " + strings.ReplaceAll(regexp.QuoteMeta(r.fault), " N ", ` \d+ `) + "$"
			if code != 1 || !regexp.MustCompile("(?m)"+want).MatchString(out) || strings.Count(out, "\nfault: ") != 1 ||
				!strings.HasSuffix(out, "\nrefused: 1 faults, 0 notes\n") {
				t.Errorf("exit %d, output\n%s\nwant exit 1 and this one fault: %s", code, out, r.fault)
			}
		})
	}
}

// applyChange applies one change of §14's table to card: "remove PTR",
// "set PTR JSON" (PTR's last token "-" appends to an array), where JSON
// may be followed by "×N": a string of N times the string, or an array of
// N times the array's items.
func applyChange(t *testing.T, card any, op string) any {
	t.Helper()
	verb, rest, _ := strings.Cut(op, " ")
	ptr, value, _ := strings.Cut(rest, " ")
	var v any
	if verb == "set" {
		n := 1
		if i := strings.LastIndex(value, "×"); i >= 0 {
			var err error
			if n, err = strconv.Atoi(value[i+len("×"):]); err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			value = value[:i]
		}
		if err := json.Unmarshal([]byte(value), &v); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		switch x := v.(type) {
		case string:
			v = strings.Repeat(x, n)
		case []any:
			var items []any
			for range n {
				items = append(items, x...)
			}
			v = items
		}
	} else if verb != "remove" {
		t.Fatalf("%s: unknown change", op)
	}
	return setPointer(t, card, strings.Split(ptr, "/")[1:], v, verb == "remove")
}

func setPointer(t *testing.T, node any, path []string, v any, remove bool) any {
	t.Helper()
	key := strings.NewReplacer("~1", "/", "~0", "~").Replace(path[0])
	switch n := node.(type) {
	case map[string]any:
		if len(path) == 1 {
			if remove {
				delete(n, key)
			} else {
				n[key] = v
			}
			return n
		}
		n[key] = setPointer(t, n[key], path[1:], v, remove)
		return n
	case []any:
		if key == "-" && len(path) == 1 {
			return append(n, v)
		}
		i, err := strconv.Atoi(key)
		if err != nil || i >= len(n) {
			t.Fatalf("no item %s", key)
		}
		if len(path) == 1 {
			if remove {
				return append(n[:i], n[i+1:]...)
			}
			n[i] = v
			return n
		}
		n[i] = setPointer(t, n[i], path[1:], v, remove)
		return n
	}
	t.Fatalf("no member %s", key)
	return nil
}
