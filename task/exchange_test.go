package task

import (
	"strings"
	"testing"
	"time"
)

// Exchanges keep the newest MaxExchanges, each question and answer
// clipped to MaxExchangeBytes with "…".
func TestAddExchangeBounds(t *testing.T) {
	var r Record
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range MaxExchanges + 3 {
		r.AddExchange(at.Add(time.Duration(i)*time.Second), "q", strings.Repeat("é", MaxExchangeBytes), false, "host")
	}
	if len(r.Exchanges) != MaxExchanges || !r.Exchanges[0].At.Equal(at.Add(3*time.Second)) {
		t.Fatalf("%d exchanges, oldest at %v", len(r.Exchanges), r.Exchanges[0].At)
	}
	a := r.Exchanges[0].Answer
	if len(a) > MaxExchangeBytes || !strings.HasSuffix(a, "…") || strings.TrimSuffix(a, "…") != strings.Repeat("é", (MaxExchangeBytes-3)/2) {
		t.Errorf("clipped answer: %d bytes, ends %q", len(a), a[len(a)-8:])
	}
	c := r.Clone()
	c.Exchanges[0].Answer = "changed"
	if r.Exchanges[0].Answer == "changed" {
		t.Error("Clone shares Exchanges")
	}
}
