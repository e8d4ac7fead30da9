package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoLeader means the stream leader of the task bucket did not answer
// within the store's RetryFor (a leader election that outlasted it, a
// cluster without a quorum, no connection): whether the task exists is not
// known, so it is not reported as [ErrNotFound]. Retrying later may help.
var ErrNoLeader = errors.New("task store: the task bucket's stream leader did not answer")

// leaderReader reads a stream's last message on a subject through the
// stream's leader: the JetStream API request
// $JS.API.STREAM.MSG.GET.<stream> with {"last_by_subj": subject}, which in
// a cluster only the stream leader answers (nats-server
// jetstream_api.go, jsMsgGetRequest) — never $JS.API.DIRECT.GET, which any
// replica answers, one behind the leader included. nats.go's
// Stream.GetLastMsgForSubject sends the direct get whenever the stream
// allows direct gets, as every KV bucket's does, so the request is sent
// here.
type leaderReader struct {
	nc      *nats.Conn
	subject string        // the stream's STREAM.MSG.GET API subject
	timeout time.Duration // of one request at most
}

// newLeaderReader reads stream through js's connection, with js's API
// prefix (or domain) and default timeout.
func newLeaderReader(js jetstream.JetStream, stream string) *leaderReader {
	o := js.Options()
	prefix := jetstream.DefaultAPIPrefix
	switch {
	case o.Domain != "":
		prefix = "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		prefix = strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return &leaderReader{nc: js.Conn(), subject: prefix + "STREAM.MSG.GET." + stream, timeout: o.DefaultTimeout}
}

// msgGetRequest and msgGetResponse are the JetStream API's stream message
// get (nats-server JSApiMsgGetRequest, JSApiMsgGetResponse).
type msgGetRequest struct {
	LastBySubject string `json:"last_by_subj"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string `json:"subject"`
		Sequence uint64 `json:"seq"`
		Header   []byte `json:"hdrs,omitempty"` // NATS/1.0 header block
		Data     []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// errNoMessage is the leader's answer that the stream holds no message on
// the subject.
var errNoMessage = errors.New("no message on the subject")

// last returns the data, sequence and headers of the stream's last message
// on subject as its leader holds it: errNoMessage if there is none, the
// leader's *jetstream.APIError for any other refusal (503 while it is
// leaderless), the request's error if nobody answered (a timeout: the
// stream has no leader yet; non-leaders stay silent).
func (l *leaderReader) last(ctx context.Context, subject string) ([]byte, uint64, nats.Header, error) {
	if l.timeout > 0 {
		// Each attempt is bounded, also under a caller's long deadline:
		// while no leader is elected nobody answers, and the retry asks
		// again.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	req, err := json.Marshal(msgGetRequest{LastBySubject: subject})
	if err != nil {
		return nil, 0, nil, err
	}
	m, err := l.nc.RequestWithContext(ctx, l.subject, req)
	if err != nil {
		return nil, 0, nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, 0, nil, fmt.Errorf("stream message get: undecodable answer: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, nil, errNoMessage
	case resp.Error != nil:
		return nil, 0, nil, resp.Error
	case resp.Message == nil:
		return nil, 0, nil, errors.New("stream message get: answer without a message")
	}
	var hdr nats.Header
	if len(resp.Message.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, 0, nil, fmt.Errorf("stream message get: headers: %w", err)
		}
	}
	return resp.Message.Data, resp.Message.Sequence, hdr, nil
}

// leaderGet reads id's last value through the task bucket's stream leader
// (see [leaderReader]), retrying transient errors (a timeout of one
// request, a 503 while leaderless) for RetryFor: the value
// and its revision; ErrNotFound if the leader holds none or a deletion;
// an error wrapping ErrNoLeader if no leader answered in that time.
func (s *Store) leaderGet(ctx context.Context, id string) ([]byte, uint64, error) {
	if !validKey(id) {
		return nil, 0, ErrNotFound
	}
	var (
		data []byte
		seq  uint64
		hdr  nats.Header
	)
	err := s.retry(ctx, func() (err error) {
		data, seq, hdr, err = s.leader.last(ctx, "$KV."+Bucket+"."+id)
		return err
	})
	switch {
	case errors.Is(err, errNoMessage):
		return nil, 0, ErrNotFound
	case err != nil && transient(err) && ctx.Err() == nil:
		return nil, 0, fmt.Errorf("%w: get %s: %w", ErrNoLeader, id, err)
	case err != nil:
		return nil, 0, fmt.Errorf("task: get %s: %w", id, err)
	}
	if op := hdr.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, 0, ErrNotFound
	}
	return data, seq, nil
}
