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
