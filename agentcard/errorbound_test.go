package agentcard_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
)

// A refusal names every fault, but its text, which a2ad answers a
// registration with, stays within MaxErrorBytes: 60 security schemes that
// are not objects, under 150-byte names, are 60 faults; the text lists
// those that fit and counts the rest, and says 60.
func TestCardErrorTextIsBounded(t *testing.T) {
	var c map[string]any
	if err := json.Unmarshal(a2ad.FraudReviewCard(), &c); err != nil {
		t.Fatal(err)
	}
	schemes := map[string]any{}
	for i := range 60 {
		schemes[fmt.Sprintf("s%02d-%s", i, strings.Repeat("x", 146))] = 1
	}
	c["securitySchemes"] = schemes
	raw, _ := json.Marshal(c)
	_, _, err := agentcard.Check(raw)
	var ce *agentcard.CardError
	if !errors.As(err, &ce) || ce.Total != 60 || len(ce.Faults) != agentcard.MaxFaults+1 {
		t.Fatalf("Check: %v; want a CardError of 60 faults, %d listed and a count", err, agentcard.MaxFaults)
	}
	msg := err.Error()
	// Each fault is "/securitySchemes/<150 bytes>: must be an object": 191
	// bytes and "; " between them; 21 fit after the 24-byte prefix.
	one := "/securitySchemes/s00-" + strings.Repeat("x", 146) + ": must be an object"
	if len(msg) > agentcard.MaxErrorBytes || !strings.HasPrefix(msg, "agentcard: 60 faults: "+one+"; ") ||
		!strings.HasSuffix(msg, "; and 39 more") || strings.Count(msg, ": must be an object") != 21 {
		t.Errorf("error text (%d bytes):\n%s\nwant at most %d bytes, 60 faults, 21 listed, and 39 more", len(msg), msg, agentcard.MaxErrorBytes)
	}
	var ve *agentcard.ValidationError
	if !errors.As(err, &ve) || ve.Pointer != "/securitySchemes/s00-"+strings.Repeat("x", 146) {
		t.Errorf("errors.As finds %+v, want the first fault", ve)
	}
}
