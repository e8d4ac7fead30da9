package agentcard

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The refetch schedule of one card: an accepted card when its
// Cache-Control says; a refused card revalidated by its ETag with a
// doubling backoff up to MaxRetry; each refusal news once per change of
// reason; an accepted card ends it.
func TestRefreshSchedule(t *testing.T) {
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	fetched := func(etag string, maxAge time.Duration) *Fetched {
		return &Fetched{Card: []byte("{}"), ETag: etag, Next: now.Add(maxAge)}
	}
	notModified := func(etag string, maxAge time.Duration) *Fetched {
		return &Fetched{NotModified: true, ETag: etag, Next: now.Add(maxAge)}
	}
	noVersion := &CardError{Faults: []*ValidationError{{"/version", "required"}}}
	noSkills := &CardError{Faults: []*ValidationError{{"/skills", "required"}}}
	errStore := errors.New("agentcard: write fraud-review: nats: timeout")
	down := &FetchError{URL: "https://agent.example/", Reason: "timed out", Err: context.DeadlineExceeded}

	var r Refresh
	for i, step := range []struct {
		res      *Fetched
		err      error
		wait     time.Duration
		news     bool
		nextETag string
	}{
		{fetched(`"a"`, time.Minute), nil, time.Minute, false, `"a"`},
		{notModified(`"a"`, time.Minute), nil, time.Minute, false, `"a"`},
		{fetched(`"b"`, 5*time.Second), noVersion, 5 * time.Second, true, `"b"`},   // refused: its ETag is kept
		{notModified(`"b"`, 5*time.Second), nil, 10 * time.Second, false, `"b"`},   // the same refused card
		{fetched(`"c"`, 5*time.Second), noVersion, 20 * time.Second, false, `"c"`}, // another body, the same reason
		{fetched(`"d"`, 5*time.Second), noSkills, 40 * time.Second, true, `"d"`},   // a new reason
		{nil, down, 8 * time.Minute, true, `"d"`},                                  // a failed fetch keeps the ETag
		{nil, down, MaxRetry, false, `"d"`},
		{fetched(`"x"`, 5*time.Second), errStore, 320 * time.Second, false, `"d"`}, // no refusal of the card: its ETag is not kept
		{notModified(`"d"`, 5*time.Second), nil, MaxRetry, false, `"d"`},           // 5 s, the 8th time

		{fetched(`"e"`, 0), nil, MinRefresh, false, `"e"`},           // accepted: the refusal ends
		{fetched(`"f"`, time.Hour), noSkills, MaxRetry, true, `"f"`}, // a refused card is retried within MaxRetry
		{fetched(`"g"`, 24*time.Hour), noSkills, MaxRetry, false, `"g"`},
	} {
		wait, news := r.Next(step.res, step.err, now)
		if wait != step.wait || news != step.news || r.ETag != step.nextETag {
			t.Errorf("step %d: wait %v news %v etag %s, want %v %v %s", i, wait, news, r.ETag, step.wait, step.news, step.nextETag)
		}
	}
}

// The waits docs/operations.md gives: a refused card served without
// Cache-Control (Fetch's Next is DefaultRefresh away) is retried after 5
// minutes, then every 10; a failed fetch after 30 s, then 1, 2, 4 and 8
// minutes, then every 10.
func TestRefreshWaitsAsDocumented(t *testing.T) {
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	noVersion := &CardError{Faults: []*ValidationError{{"/version", "required"}}}
	var refused Refresh
	for i, want := range []time.Duration{5 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		res := &Fetched{Card: []byte("{}"), ETag: `"a"`, Next: now.Add(DefaultRefresh)}
		if i > 0 {
			res = &Fetched{NotModified: true, ETag: `"a"`, Next: now.Add(DefaultRefresh)}
		}
		if wait, _ := refused.Next(res, noVersion, now); wait != want {
			t.Errorf("refused card without Cache-Control, retry %d: wait %v, want %v", i+1, wait, want)
		}
	}
	down := &FetchError{URL: "https://agent.example/", Reason: "answered 304 Not Modified to a request without If-None-Match: no card came"}
	var failed Refresh
	for i, want := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		if wait, _ := failed.Next(nil, down, now); wait != want {
			t.Errorf("failed fetch, retry %d: wait %v, want %v", i+1, wait, want)
		}
	}
}
