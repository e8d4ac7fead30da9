package task

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
	"unique"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// OpenTask is what the store's watcher knows of one open (non-terminal)
// task: enough to choose the open tasks a listing shows without reading
// the others ([Store.OpenTasks]). About 150 bytes a task with its map entry
// (tenant and agent strings are interned).
type OpenTask struct {
	ID        string
	Tenant    string
	AgentID   string
	State     State
	CreatedAt time.Time
}

// index keeps the open-task index and count current with one snapshot.
func (s *Store) index(sn Snapshot, loaded bool) {
	open := !sn.Deleted && !sn.State.Terminal()
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	_, had := s.openIdx[sn.ID]
	switch {
	case open:
		if s.openIdx == nil {
			s.openIdx = map[string]OpenTask{}
		}
		s.openIdx[sn.ID] = OpenTask{ID: sn.ID, Tenant: unique.Make(sn.Tenant).Value(), AgentID: unique.Make(sn.AgentID).Value(),
			State: sn.State, CreatedAt: sn.CreatedAt}
		if !had {
			s.open.Add(1)
		}
	case had:
		delete(s.openIdx, sn.ID)
		s.open.Add(-1)
		if !sn.Deleted {
			s.ended.Add(1) // it ended
		}
	case sn.Deleted:
		// A record that was not open went: at start, a marker the loading
		// watcher reports (nothing was counted); after, a removal.
		if loaded {
			s.ended.Add(-1)
		}
	case !loaded || endedAt(sn).Equal(sn.CreatedAt):
		// Loaded ended, or created ended. Any other ended record that was
		// not open is a write after its end, counted when it ended.
		s.ended.Add(1)
	}
}

// endedAt is when a record ended: EndedAt, or its last write in records of
// versions that did not keep EndedAt.
func endedAt(sn Snapshot) time.Time {
	if sn.EndedAt.IsZero() {
		return sn.UpdatedAt
	}
	return sn.EndedAt
}

// OpenTasks yields every open task the store's watcher has seen, in no
// order, from memory: no record is read. The index is as current as the
// watcher (a write of another instance shows once the watcher delivers
// it), so a caller reads each record it keeps ([Store.Get]) and checks it
// again. The watcher waits while the sequence runs: keep the loop body
// short.
func (s *Store) OpenTasks() iter.Seq[OpenTask] {
	return func(yield func(OpenTask) bool) {
		s.idxMu.RLock()
		defer s.idxMu.RUnlock()
		for _, t := range s.openIdx {
			if !yield(t) {
				return
			}
		}
	}
}

// maxBatchBytes bounds the bytes of one batched direct get: unbounded, the
// server fills a reply up to its pending limit (64 MiB) and drops the
// reader as a slow consumer (about 30 records of 700 kB).
const maxBatchBytes = 8 << 20

// getManyChunk is how many records one multi_last read of [Store.GetMany]
// asks for: at most about 8 MB of the largest records.
const getManyChunk = 8

// scanBackWindow is how many stored values [Store.ScanBack] reads in one
// batch (one JetStream direct get request).
const scanBackWindow = 256

// ScanBack calls fn with the bucket's current records, newest write
// first: in descending stream sequence, which is the order of the records'
// last writes, each as a [Scanned]: its summary (the members the store's
// watcher reports, read in one pass without decoding the record), Stored,
// the time JetStream stored that write (the stream message's timestamp,
// the NATS server's clock), and the whole record on demand. A record's
// CreatedAt is at or before its stored time (a2ad's clock, not the
// server's: allow for their skew), so a reader that wants the newest
// created records can stop once stored is older than what it holds. fn
// returns false to stop. Deleted and purged keys are skipped.
//
// It reads scanBackWindow values at a time with JetStream's batched
// direct get (ADR-31, nats-server ≥ 2.11), from the stream's last
// sequence down: reading stops where fn stops, so a caller that stops
// early reads only the newest part of the bucket, however large. Direct
// gets may be answered by any replica of the bucket's stream, so a write
// acknowledged a moment ago may be missing. Not a snapshot: a record
// written while it runs may be missed or reported twice (callers keep one
// per ID).
//
// Errors: fn's, returned unchanged; a value that is not a record is
// "task: decode <id>: …"; NATS failures and the end of ctx are
// "task: scan back: …" wrapping the cause.
func (s *Store) ScanBack(ctx context.Context, fn func(v *Scanned) (bool, error)) error {
	var info *jetstream.StreamInfo
	err := s.retry(ctx, func() (err error) { info, err = s.stream.Info(ctx); return err })
	if err != nil {
		return fmt.Errorf("task: scan back: %w", err)
	}
	st := info.State
	if st.Msgs == 0 || st.LastSeq < st.FirstSeq {
		return nil
	}
	// The sequence range expected to hold a window's worth of values: a
	// bucket of one value per key is sparse (each write removes the key's
	// previous value).
	span := max(1, (st.LastSeq-st.FirstSeq+1)*scanBackWindow/st.Msgs)
	prefix := "$KV." + Bucket + "."
	for hi := st.LastSeq; hi >= st.FirstSeq; {
		lo := st.FirstSeq
		if hi-st.FirstSeq >= span {
			lo = hi - span + 1
		}
		window, err := s.readRange(ctx, lo, hi)
		if err != nil {
			return err
		}
		for i := len(window) - 1; i >= 0; i-- {
			m := window[i]
			if m.Header.Get("KV-Operation") != "" || m.Header.Get("Nats-Marker-Reason") != "" || len(m.Data) == 0 {
				continue
			}
			v := &Scanned{Snapshot: Snapshot{ID: strings.TrimPrefix(m.Subject, prefix), Revision: m.Sequence, Stored: m.Time, Bytes: len(m.Data)}, raw: m.Data}
			if !summarize(m.Data, &v.Snapshot) {
				_, err := decode(m.Data)
				if err == nil {
					err = errors.New("not a task record")
				}
				return fmt.Errorf("task: decode %s: %w", v.ID, err)
			}
			more, err := fn(v)
			if err != nil || !more {
				return err
			}
		}
		if lo == st.FirstSeq {
			return nil
		}
		hi = lo - 1
	}
	return nil
}

// readRange reads the stored values with sequences lo to hi, in order.
func (s *Store) readRange(ctx context.Context, lo, hi uint64) ([]*jetstream.RawStreamMsg, error) {
	var out []*jetstream.RawStreamMsg
	for from := lo; from <= hi; {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("task: scan back: %w", err)
		}
		msgs, err := jetstreamext.GetBatch(ctx, s.js, "KV_"+Bucket, scanBackWindow, jetstreamext.GetBatchSeq(from), jetstreamext.GetBatchMaxBytes(maxBatchBytes))
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("task: scan back: %w", err)
		}
		n, past := 0, false
		for m, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("task: scan back: %w", err)
			}
			n++
			if m.Sequence > hi {
				past = true
				break
			}
			out = append(out, m)
			from = m.Sequence + 1
		}
		// A short batch is not the range's end: the server also cuts a
		// reply at its byte limit (64 MiB).
		if past || n == 0 {
			return out, nil
		}
	}
	return out, nil
}

// storedValue is one value of the bucket's stream, as [Store.readFrom]
// reads it.
type storedValue struct {
	Seq  uint64 // its stream sequence: the KV revision
	ID   string // its key
	Snap Snapshot
	// Record is whether it is a record a2ad wrote (false for deletion and
	// purge markers, and any other value).
	Record bool
}

// readFrom reads up to n stored values of the bucket with sequences from
// seq on, in stream order (one JetStream batched direct get), each
// summarized as the watcher does. A short or empty result is the end of
// the stream. Errors wrap the NATS error or the end of ctx.
func (s *Store) readFrom(ctx context.Context, seq uint64, n int) ([]storedValue, error) {
	msgs, err := jetstreamext.GetBatch(ctx, s.js, "KV_"+Bucket, n, jetstreamext.GetBatchSeq(max(seq, 1)), jetstreamext.GetBatchMaxBytes(maxBatchBytes))
	if errors.Is(err, jetstreamext.ErrNoMessages) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("task: read from %d: %w", seq, err)
	}
	prefix := "$KV." + Bucket + "."
	var out []storedValue
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("task: read from %d: %w", seq, err)
		}
		v := storedValue{Seq: m.Sequence, ID: strings.TrimPrefix(m.Subject, prefix)}
		if m.Header.Get("KV-Operation") == "" && m.Header.Get("Nats-Marker-Reason") == "" && len(m.Data) > 0 {
			v.Record = summarize(m.Data, &v.Snap)
		}
		v.Snap.ID, v.Snap.Revision, v.Snap.Stored = v.ID, v.Seq, m.Time
		out = append(out, v)
	}
	return out, nil
}

// lastSeq is the bucket's stream's last sequence, read from the server.
func (s *Store) lastSeq(ctx context.Context) (uint64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("task: stream info: %w", err)
	}
	return info.State.LastSeq, nil
}

// GetMany reads the newest value of each record of ids in batched direct
// gets (JetStream's multi_last requests for their subjects, getManyChunk
// at a time): for a page of records where one [Store.Get] each would cost
// a round trip each. An id the batched reads do not return is read with
// Get, whose "not found" the stream leader confirms; an id with no record
// is absent from the result. Errors wrap the NATS error or a record's
// decoding.
func (s *Store) GetMany(ctx context.Context, ids []string) (map[string]*Record, error) {
	prefix := "$KV." + Bucket + "."
	out := make(map[string]*Record, len(ids))
	for chunk := range slices.Chunk(ids, getManyChunk) {
		subjects := make([]string, 0, len(chunk))
		for _, id := range chunk {
			if validKey(id) {
				subjects = append(subjects, prefix+id)
			}
		}
		if len(subjects) == 0 {
			continue
		}
		msgs, err := jetstreamext.GetLastMsgsFor(ctx, s.js, "KV_"+Bucket, subjects)
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("task: get many: %w", err)
		}
		for m, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("task: get many: %w", err)
			}
			if m.Header.Get("KV-Operation") != "" || m.Header.Get("Nats-Marker-Reason") != "" || len(m.Data) == 0 {
				continue
			}
			id := strings.TrimPrefix(m.Subject, prefix)
			r, err := decode(m.Data)
			if err != nil {
				return nil, fmt.Errorf("task: decode %s: %w", id, err)
			}
			out[id] = r
		}
	}
	for _, id := range ids {
		if _, ok := out[id]; ok || !validKey(id) {
			continue
		}
		r, _, err := s.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[id] = r
	}
	return out, nil
}

// Scanned is one stored record as [Store.ScanBack] meets it: its summary,
// Stored among it, and the record itself, decoded by Record.
type Scanned struct {
	Snapshot
	raw []byte
}

// Record decodes the whole record; errors are "task: decode <id>: …".
func (v *Scanned) Record() (*Record, error) {
	r, err := decode(v.raw)
	if err != nil {
		return nil, fmt.Errorf("task: decode %s: %w", v.ID, err)
	}
	return r, nil
}
