package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/spf13/cobra"
)

// cardReport is what `agents check-card --json` prints.
type cardReport struct {
	File string `json:"file"`
	// Accepted is whether a2ad would register the card.
	Accepted bool `json:"accepted"`
	// Shape is "1.0", or "0.3" for a card a2ad reads in its 1.0 form.
	Shape       string                       `json:"shape"`
	Fingerprint string                       `json:"fingerprint,omitempty"`
	Faults      []*agentcard.ValidationError `json:"faults,omitempty"`
	Notes       []agentcard.Note             `json:"notes,omitempty"`
	Warnings    []agentcard.Warning          `json:"warnings,omitempty"`
	// Agent and NotDelegableReason: with --agent, whether a2ad could
	// delegate to the card's agent registered under that id; Binding and
	// Interface, over which of its interfaces (agentcard.SelectInterface:
	// the card's origin is that of --card-url, none without it, as for a
	// card registered over NATS).
	Agent     string               `json:"agent,omitempty"`
	Binding   string               `json:"binding,omitempty"`
	Interface *agentcard.Interface `json:"interface,omitempty"`
	// FaultCount and NoteCount are the real totals, also when Faults and
	// Notes stop at agentcard.MaxFaults and MaxNotes with an "and N more"
	// entry.
	FaultCount         int    `json:"fault_count"`
	NoteCount          int    `json:"note_count"`
	NotDelegableReason string `json:"not_delegable_reason,omitempty"`
}

// errCardRefused is the exit status of a refused card: the findings are
// printed already.
var errCardRefused = errors.New("card refused")

func newCheckCard(f *adminFlags) *cobra.Command {
	var agentID, cardURL string
	cmd := &cobra.Command{
		Use:   "check-card FILE [--agent ID [--card-url URL]]",
		Short: "Check an agent card offline as a2ad would register it, printing every fault and note",
		Long: `Check an A2A agent card (JSON, "-" for stdin) without a daemon, as a2ad reads
a card an agent registers or serves at its card_url: a 0.3 card is read in its
1.0 form, a card with supportedInterfaces is read as 1.0 whatever else it
carries. It prints every fault that refuses the card, each with its JSON
pointer (RFC 6901), and every note: members a2ad does not know (kept in the
stored card and its fingerprint), interfaces and links nobody could use.
For an accepted card it prints the fingerprint to approve, and card text
phrased as instructions to a model. With --agent ID it also says whether a2ad
could delegate to the card's agent registered under that id, and over which
interface; --card-url says where a2ad would fetch the card (the agent's
card_url), whose origin its HTTP interfaces may have (without it, the card
is taken as registered over NATS, which vouches for no HTTP origin).
Exit status 1 when the card is refused.

  a2ad agents check-card fraud-review.json --agent fraud-review
  a2ad agents check-card movie-agent.json --agent movie-agent --card-url https://movies.example
  curl -s https://agent.example.com/.well-known/agent-card.json | a2ad agents check-card -`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			raw, err := readCardFile(c.InOrStdin(), args[0])
			if err != nil {
				return err
			}
			origin := ""
			if cardURL != "" {
				u, err := agentcard.CardURL(cardURL)
				if err != nil {
					return fmt.Errorf("--card-url: %w", err)
				}
				origin = agentcard.OriginOf(u)
			}
			rep := checkCard(args[0], raw, agentID, origin)
			if f.asJSON {
				b, _ := json.MarshalIndent(rep, "", "  ")
				if _, err := fmt.Fprintf(c.OutOrStdout(), "%s\n", b); err != nil {
					return err
				}
			} else if err := printCardReport(c.OutOrStdout(), rep); err != nil {
				return err
			}
			if !rep.Accepted {
				c.SilenceErrors = true
				return errCardRefused
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&agentID, "agent", "", "the agent id the card would be registered under: also check that a2ad could delegate to it")
	cmd.Flags().StringVar(&cardURL, "card-url", "", "with --agent: the agent's card_url, whose origin the card's HTTP interfaces may have")
	return cmd
}

func readCardFile(stdin io.Reader, name string) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	raw, err := io.ReadAll(io.LimitReader(r, agentcard.MaxCardBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return raw, nil
}

func checkCard(file string, raw []byte, agentID, cardOrigin string) cardReport {
	rep := cardReport{File: file, Shape: "1.0", Agent: agentID}
	normal, err := agentcard.Normalize(raw)
	if err != nil || string(normal) != string(raw) {
		rep.Shape = "0.3"
	}
	if fp, err := agentcard.Fingerprint(normal); err == nil {
		rep.Fingerprint = fp // of the card as a2ad stores it
	}
	card, notes, err := agentcard.Check(raw)
	rep.Notes = notes
	var ce *agentcard.CardError
	var ve *agentcard.ValidationError
	switch {
	case errors.As(err, &ce):
		rep.Faults = ce.Faults
		rep.FaultCount = ce.Total
	case errors.As(err, &ve):
		rep.Faults = []*agentcard.ValidationError{ve}
	case err != nil:
		rep.Faults = []*agentcard.ValidationError{{Reason: err.Error()}}
	}
	if rep.FaultCount == 0 {
		rep.FaultCount = len(rep.Faults)
	}
	rep.NoteCount = agentcard.CountNotes(rep.Notes)
	if err != nil {
		rep.Fingerprint = ""
		return rep
	}
	rep.Accepted = true
	rep.Warnings = agentcard.InjectionWarnings(card)
	if agentID != "" {
		in, binding, fault := agentcard.SelectInterface(card, agentcard.SelectOptions{CardOrigin: cardOrigin})
		rep.NotDelegableReason = fault
		if fault == "" {
			rep.Binding, rep.Interface = binding, &in
		}
		rep.Notes = append(rep.Notes, agentcard.AgentNotes(agentID, card)...)
		rep.NoteCount = agentcard.CountNotes(rep.Notes)
	}
	return rep
}

// shownPointer is a JSON pointer as a line may show it: quoted unless it
// is plain text, "(card)" for the whole card.
func shownPointer(ptr string) string {
	if q := strconv.Quote(ptr); q[1:len(q)-1] != ptr {
		return q
	}
	if ptr == "" {
		return "(card)"
	}
	return ptr
}

// printCardReport prints one finding a line; pointers that are not plain
// text are quoted, so that member names cannot forge lines.
func printCardReport(w io.Writer, rep cardReport) error {
	p := shownPointer
	fmt.Fprintf(w, "card: %s (A2A %s shape)\n", rep.File, rep.Shape)
	for _, f := range rep.Faults {
		fmt.Fprintf(w, "fault: %s: %s\n", p(f.Pointer), f.Reason)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s: %s\n", p(n.Pointer), n.Reason)
	}
	for _, x := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s: card text phrased as instructions to a model (%s)\n", p(x.Pointer), x.Kind)
	}
	if !rep.Accepted {
		_, err := fmt.Fprintf(w, "refused: %d faults, %d notes\n", rep.FaultCount, rep.NoteCount)
		return err
	}
	if rep.Agent != "" {
		if rep.NotDelegableReason != "" {
			fmt.Fprintf(w, "not delegable as agent %s: %s\n", rep.Agent, rep.NotDelegableReason)
		} else {
			fmt.Fprintf(w, "delegable as agent %s once approved\n", rep.Agent)
			fmt.Fprintf(w, "binding: %s %s\n", rep.Binding, shownText(rep.Interface.URL))
		}
	}
	fmt.Fprintf(w, "fingerprint: %s\n", rep.Fingerprint)
	_, err := fmt.Fprintf(w, "accepted: %d notes, %d warnings\n", rep.NoteCount, len(rep.Warnings))
	return err
}
