package task

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unique"
	"unsafe"

	"github.com/tidwall/gjson"
)

// summarize fills snap's members from a stored record's JSON, reading only
// its top-level members the watcher reports (tenant, agent_id, state,
// created_at, updated_at, ended_at, deadline, idempotency_key, outbox's
// not_before, binding, agent_task_id, follow, event_seq) in one pass that skips every
// other value (gjson): the watcher reads every record in the bucket at
// start, and decoding each whole (encoding/json, which also validates the
// value in a first pass) was most of the time it took. False for a value
// that is not a JSON object, or whose reported members are not of their
// types (a time not RFC 3339, a string that is not one): encoding/json
// would refuse those too. Member names match exactly (a2ad writes them),
// not case-insensitively as encoding/json's would.
func summarize(val []byte, snap *Snapshot) bool {
	if !gjson.ValidBytes(val) {
		return false
	}
	// A view of val, not a copy (gjson.ParseBytes copies): the strings
	// kept in snap are cloned, so none holds on to the value.
	root := gjson.Parse(unsafe.String(unsafe.SliceData(val), len(val)))
	if !root.IsObject() {
		return false
	}
	ok := true
	str := func(v gjson.Result) string {
		switch v.Type {
		case gjson.String:
			return strings.Clone(v.Str)
		case gjson.Null:
		default:
			ok = false
		}
		return ""
	}
	// Tenants and agent ids repeat across records: interned, they cost no
	// allocation after the first.
	interned := func(v gjson.Result) string {
		switch v.Type {
		case gjson.String:
			return unique.Make(v.Str).Value()
		case gjson.Null:
		default:
			ok = false
		}
		return ""
	}
	at := func(v gjson.Result) time.Time {
		var t time.Time
		switch v.Type {
		case gjson.String:
			// The JSON text itself, quotes included, as encoding/json
			// hands it to time.Time: an escaped character is refused.
			if err := t.UnmarshalJSON([]byte(v.Raw)); err != nil {
				ok = false
			}
		case gjson.Null:
		default:
			ok = false
		}
		return t
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "tenant":
			snap.Tenant = interned(v)
		case "agent_id":
			snap.AgentID = interned(v)
		case "state":
			snap.State = knownState(v.Str)
			if snap.State == "" {
				snap.State = State(str(v))
			}
		case "created_at":
			snap.CreatedAt = at(v)
		case "updated_at":
			snap.UpdatedAt = at(v)
		case "ended_at":
			snap.EndedAt = at(v)
		case "deadline":
			snap.Deadline = at(v)
		case "idempotency_key":
			snap.Idempotent = v.Type == gjson.String && v.Str != ""
			if v.Type != gjson.String && v.Type != gjson.Null {
				ok = false
			}
		case "binding":
			snap.Binding = str(v)
		case "agent_task_id":
			snap.AgentTaskID = str(v)
		case "outbox":
			snap.OutboxAt = time.Time{}
			switch v.Type {
			case gjson.JSON:
				if !v.IsObject() {
					ok = false
					break
				}
				snap.OutboxAt = at(v.Get("not_before"))
				if snap.OutboxAt.IsZero() {
					snap.OutboxAt = time.Unix(1, 0)
				}
			case gjson.Null:
			default:
				ok = false
			}
		case "event_seq":
			snap.EventSeq = 0
			switch v.Type {
			case gjson.Number:
				n, err := strconv.Atoi(v.Raw)
				if err != nil {
					ok = false
				}
				snap.EventSeq = n
			case gjson.Null:
			default:
				ok = false
			}
		case "follow":
			snap.Follow = nil
			if v.Type != gjson.Null {
				var f FollowLease
				if json.Unmarshal([]byte(v.Raw), &f) != nil {
					ok = false
				}
				snap.Follow = &f
			}
		}
		return ok
	})
	return ok
}

// knownState is the lifecycle state spelt s, without allocating; "" if s
// is none.
func knownState(s string) State {
	for _, st := range [...]State{Submitted, Working, InputRequired, AuthRequired, Completed, Failed, Canceled, Rejected} {
		if string(st) == s {
			return st
		}
	}
	return ""
}
