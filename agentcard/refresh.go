package agentcard

import (
	"errors"
	"time"
)

// MaxRetry bounds the wait before a2ad fetches again a card it refused, or
// failed to fetch: the backoff doubles up to it.
const MaxRetry = 10 * time.Minute

// Refresh is the schedule of one agent card's refetches (A2A 1.0 §8.6.2:
// conditional requests with the stored ETag). Use it as: Fetch with
// Refresh.ETag; register the card when one came; then [Refresh.Next] with
// the outcome, and wait what it returns. Its zero value is ready.
//
// An accepted card is refetched when its Cache-Control says ([Fetched].Next).
// A refused card, or a failed fetch, is retried with backoff: the first
// retry when the response's Cache-Control says (at least [MinRefresh]; after
// a failed fetch, [NoCacheRefresh]), each next one after twice as long, at
// most [MaxRetry]. A refused card's ETag is kept, so that the retries are
// revalidations (If-None-Match) and a 304 is the same refused card again.
// Next reports a refusal as news once per change of its reason
// ([RefusalReason]), for the caller to log and audit it once; an accepted
// card ends the refusal, so that the next one is news again.
type Refresh struct {
	// ETag is the If-None-Match for the next fetch ("" for none).
	ETag string

	refused  bool   // ETag is a refused card's
	failures int    // consecutive refusals and failed fetches
	reason   string // of the refusal last reported
}

// Next takes the outcome of one fetch, res and err as [Fetcher.Fetch]
// returned them, err being instead the registration's error when a card
// came and was refused, and returns how long to wait before the next fetch
// and whether err is a refusal whose reason changed (news). now is the
// current time.
func (r *Refresh) Next(res *Fetched, err error, now time.Time) (wait time.Duration, news bool) {
	next := DefaultRefresh
	if res != nil {
		next = res.Next.Sub(now)
	}
	switch {
	case err == nil && res != nil && !(res.NotModified && r.refused):
		// A card accepted, or a 304 to the accepted card's ETag.
		r.ETag, r.refused, r.failures, r.reason = res.ETag, false, 0, ""
		return max(next, MinRefresh), false
	case err != nil:
		reason, refusal := RefusalReason(err)
		if refusal && reason != r.reason {
			r.reason, news = reason, true
		}
		var fe *FetchError
		if refusal && res != nil && !res.NotModified && !errors.As(err, &fe) {
			// The card itself was refused: revalidate it from now on. (An
			// error that refuses no card, a store that failed, keeps the
			// ETag as it was, so that the card comes again.)
			r.ETag, r.refused = res.ETag, true
		}
	}
	// A refusal, a failed fetch, or a 304 to the refused card's ETag.
	r.failures++
	wait = NoCacheRefresh
	if res != nil {
		wait = max(next, MinRefresh)
	}
	for i := 1; i < r.failures && wait < MaxRetry; i++ {
		wait *= 2
	}
	return min(wait, MaxRetry), news
}
