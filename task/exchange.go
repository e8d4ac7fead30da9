package task

import (
	"time"

	"github.com/a2ad/a2ad/internal/untrusted"
)

// Exchange is one question the agent asked and the answer a host gave it,
// kept in the record for the operators' review (the admin API's task
// record, the web console's task page). The history names only how a
// question was answered; this is the text.
type Exchange struct {
	At time.Time `json:"at"`
	// Question is the agent's question as hosts saw it, clipped to
	// MaxExchangeBytes (untrusted.Clip: "…" marks a cut).
	Question string `json:"question"`
	// Answer is the host's answer text, or for answer_data a2ad's JSON
	// encoding of the data (Data true), clipped to MaxExchangeBytes.
	Answer string `json:"answer"`
	Data   bool   `json:"data,omitempty"`
	// By is the subject of the host principal that answered.
	By string `json:"by,omitempty"`
}

// MaxExchanges bounds Record.Exchanges (the newest are kept) and
// MaxExchangeBytes each question and answer in it: 8 × 2 × 4 KiB at most.
const (
	MaxExchanges     = 8
	MaxExchangeBytes = 4 << 10
)

// AddExchange records that by answered question with answer at at
// (data: answer is answer_data's JSON), within the bounds above.
func (r *Record) AddExchange(at time.Time, question, answer string, data bool, by string) {
	r.Exchanges = append(r.Exchanges, Exchange{At: at, Question: untrusted.Clip(question, MaxExchangeBytes),
		Answer: untrusted.Clip(answer, MaxExchangeBytes), Data: data, By: by})
	if n := len(r.Exchanges); n > MaxExchanges {
		r.Exchanges = append([]Exchange(nil), r.Exchanges[n-MaxExchanges:]...)
	}
}
