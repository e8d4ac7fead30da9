// Package jsretry retries NATS and JetStream operations through the errors
// a cluster produces while it heals: timeouts, "no responders" while a
// stream leader is elected, a connection being re-established, and
// JetStream's 503 "temporarily unavailable" answers. Anything else is a
// real answer and is returned at once.
package jsretry

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Transient reports whether err is one a retry may cure. JetStream's
// answers that its store is full (see [StorageFull]) are not, although
// JetStream sends them with status 503 too: retrying them only makes the
// caller wait for the same answer.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return false
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return true
	case StorageFull(err):
		return false
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 || apiErr.Code == 408
	}
	return false
}

// JetStream error codes (nats-server's jetstream_errors.json) that mean a
// write did not fit: the server's or account's store is exhausted
// (10023 "insufficient resources", 10047 "insufficient storage resources
// available"), or the stream's own limits refuse it (10077 "maximum bytes
// exceeded", "maximum messages exceeded", …, which JetStream reports as a
// store failure).
const (
	codeInsufficientResources = 10023
	codeStorageExceeded       = 10047
	codeStoreFailed           = 10077
)

// StorageFull reports whether err is JetStream refusing a write for lack
// of room: the store is full or a stream's max_bytes or max_msgs is
// reached. Retrying does not help until something is removed.
func StorageFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case codeInsufficientResources, codeStorageExceeded, codeStoreFailed:
		return true
	}
	return false
}

// Do runs op until it succeeds, fails with an error that is not
// [Transient], ctx ends, or limit has passed; it pauses 50 ms doubling up
// to 1 s between attempts. It returns op's last error.
func Do(ctx context.Context, limit time.Duration, op func() error) error {
	until := time.Now().Add(limit)
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil || !Transient(err) || ctx.Err() != nil || time.Now().After(until) {
			return err
		}
		Pause(ctx, attempt)
	}
}

// Pause sleeps before retry number attempt (from 0): 50 ms doubling up to
// 1 s, or until ctx ends.
func Pause(ctx context.Context, attempt int) {
	t := time.NewTimer(min(50*time.Millisecond<<min(attempt, 5), time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
