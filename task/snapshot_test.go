package task

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// summarizeByDecoding is what the watcher did before summarize: the
// reported members decoded with encoding/json. It is the oracle.
func summarizeByDecoding(val []byte, snap *Snapshot) bool {
	var v struct {
		Tenant         string    `json:"tenant"`
		AgentID        string    `json:"agent_id"`
		CreatedAt      time.Time `json:"created_at"`
		UpdatedAt      time.Time `json:"updated_at"`
		EndedAt        time.Time `json:"ended_at"`
		IdempotencyKey string    `json:"idempotency_key"`
		State          State     `json:"state"`
		Deadline       time.Time `json:"deadline"`
		Outbox         *struct {
			NotBefore time.Time `json:"not_before"`
		} `json:"outbox"`
		Binding     string       `json:"binding"`
		AgentTaskID string       `json:"agent_task_id"`
		Follow      *FollowLease `json:"follow"`
		EventSeq    int          `json:"event_seq"`
	}
	if json.Unmarshal(val, &v) != nil {
		return false
	}
	snap.Tenant, snap.AgentID, snap.State, snap.Deadline = v.Tenant, v.AgentID, v.State, v.Deadline
	snap.CreatedAt, snap.Idempotent = v.CreatedAt, v.IdempotencyKey != ""
	snap.UpdatedAt, snap.EndedAt = v.UpdatedAt, v.EndedAt
	snap.Binding, snap.AgentTaskID, snap.Follow = v.Binding, v.AgentTaskID, v.Follow
	snap.EventSeq = v.EventSeq
	if v.Outbox != nil {
		snap.OutboxAt = v.Outbox.NotBefore
		if snap.OutboxAt.IsZero() {
			snap.OutboxAt = time.Unix(1, 0)
		}
	}
	return true
}

// fuzzRecord is a record a2ad could write, its members from the fuzzer.
func fuzzRecord(s string, n int64, flags uint8) *Record {
	at := time.Unix(n%4e9, n%1e9).UTC()
	r := &Record{ID: "t1", Tenant: s, AgentID: s + "-agent", State: State(s), CreatedAt: at, UpdatedAt: at.Add(time.Second),
		Subject: s, BriefDigest: s, EventSeq: int(n % 1000), History: []Transition{{At: at, From: Submitted, To: Working, Reason: s, Source: SourceAgent}}}
	if flags&1 != 0 {
		r.State, r.EndedAt = Completed, at.Add(time.Minute)
	}
	if flags&2 != 0 {
		r.IdempotencyKey = s
	}
	if flags&4 != 0 {
		r.Deadline = at.Add(time.Hour)
	}
	if flags&8 != 0 {
		r.Outbox = &Outbound{Method: s}
		if flags&16 != 0 {
			r.Outbox.NotBefore = at
		}
	}
	if flags&32 != 0 {
		r.Binding, r.AgentTaskID = s, s+"/task"
		r.Follow = &FollowLease{Owner: s, Until: at, Mode: "poll"}
	}
	return r
}

// The watcher's summary of any record a2ad writes is what decoding it
// whole says, member for member.
func FuzzSummarizeRecord(f *testing.F) {
	f.Add("default", int64(1764800000), uint8(0))
	f.Add("ténant \"quoted\" \\ \u2028", int64(-1), uint8(63))
	f.Add("", int64(0), uint8(8))
	f.Fuzz(func(t *testing.T, s string, n int64, flags uint8) {
		b, err := encode(fuzzRecord(s, n, flags))
		if err != nil {
			t.Skip()
		}
		var got, want Snapshot
		if !summarizeByDecoding(b, &want) {
			t.Fatalf("oracle refused a2ad's own record %s", b)
		}
		if !summarize(b, &got) {
			t.Fatalf("summarize refused %s", b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("summary\n %+v\nwant\n %+v\nof %s", got, want, b)
		}
	})
}

// Any value at all: summarize never panics, accepts only a JSON object,
// and what it accepts the decoder accepts too, with the same members.
func FuzzSummarizeAnyValue(f *testing.F) {
	b, _ := encode(fuzzRecord("default", 1764800000, 63))
	for _, seed := range []string{string(b), `{}`, `[]`, `null`, `{"tenant":5}`, `{"outbox":"x"}`, `{"outbox":{"not_before":"nope"}}`,
		`{"follow":{"until":1}}`, `{"event_seq":1.5}`, `{"created_at":"2026-12-04T10:00:00\u005a"}`, `{"event_seq":-3}`, `{"event_seq":1e3}`, `{"event_seq":99999999999999999999}`, `{"created_at":"2026-12-04T10:00:00Z","state":"working"`, `{"state":"a","state":"b"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, val []byte) {
		var got, want Snapshot
		if !summarize(val, &got) {
			return
		}
		if !summarizeByDecoding(val, &want) {
			if caseFolded(val) {
				return // encoding/json matches member names case-insensitively
			}
			t.Fatalf("summarize accepted what the decoder refuses: %q", val)
		}
		if !reflect.DeepEqual(got, want) && !caseFolded(val) && !duplicated(val) {
			t.Fatalf("summary\n %+v\nwant\n %+v\nof %q", got, want, val)
		}
	})
}

// caseFolded reports whether val has a top-level member whose name is a
// reported member's in another case, or another spelling encoding/json
// folds to it (which summarize does not match, as a2ad never writes one).
func caseFolded(val []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(val, &m) != nil {
		return true
	}
	for k := range m {
		switch k {
		case "tenant", "agent_id", "state", "created_at", "updated_at", "ended_at", "deadline", "idempotency_key", "outbox", "binding", "agent_task_id", "follow", "event_seq":
			continue
		}
		for _, name := range []string{"tenant", "agent_id", "state", "created_at", "updated_at", "ended_at", "deadline", "idempotency_key", "outbox", "binding", "agent_task_id", "follow", "event_seq"} {
			if equalFoldKey(k, name) {
				return true
			}
		}
	}
	return false
}

func equalFoldKey(a, b string) bool {
	ra, rb := []rune(a), []rune(b)
	if len(ra) != len(rb) {
		return len(a) != len(b) // 'K' (Kelvin) and 'ſ' fold to ASCII letters
	}
	for i := range ra {
		if ra[i] != rb[i] && toLowerASCII(ra[i]) != toLowerASCII(rb[i]) && !(ra[i] > 127 || rb[i] > 127) {
			return false
		}
	}
	return true
}

func toLowerASCII(r rune) rune {
	if 'A' <= r && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// duplicated reports whether val repeats a top-level member name, or an
// outbox member: which one counts differs between JSON decoders.
func duplicated(val []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(val))
	seen := map[string]bool{}
	if _, err := dec.Token(); err != nil {
		return true
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return true
		}
		name, _ := k.(string)
		if seen[name] {
			return true
		}
		seen[name] = true
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return true
		}
		if name == "outbox" && len(raw) > 0 && raw[0] == '{' && duplicated(raw) {
			return true
		}
	}
	return false
}

// A record as the watcher reads it at start, decoded whole against
// summarized: the watcher's cost per stored record.
func BenchmarkSummarize(b *testing.B) {
	r := fuzzRecord("default", 1764800000, 1)
	r.DroppedEvidence = []string{"/customer/email", "/customer/phone"}
	r.Applied = []string{"t1.1", "t1.2", "t1.3"}
	r.History = append(r.History, r.History[0], r.History[0])
	val, _ := encode(r)
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var s Snapshot
			summarizeByDecoding(val, &s)
		}
	})
	b.Run("summarize", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var s Snapshot
			summarize(val, &s)
		}
	})
	b.Logf("record of %d bytes", len(val))
}
