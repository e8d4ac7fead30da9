package natsauth

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Conn is an agent connection as a server of the cluster lists it.
type Conn struct {
	// ServerID is the server's id, CID the connection's id on it.
	ServerID string
	CID      uint64
	// AgentID is its user name; JTI and IssuedAt the credential's jti and
	// iat, from the user JWT a2ad issued.
	AgentID  string
	JTI      string
	IssuedAt time.Time
}

// Kicker lists and closes agent connections on every server of a NATS
// cluster through the system account's services ($SYS.REQ.SERVER.PING.CONNZ,
// $SYS.REQ.SERVER.<id>.KICK; nats-server 2.10+). NC must be a connection of
// a system account user allowed to publish to those subjects and to
// receive the answers on its inbox.
type Kicker struct {
	NC *nats.Conn
	// Account is the account whose connections are listed.
	Account string
	// Gather is how long [Kicker.Conns] waits for more servers after the
	// last answer (default 300 ms); Timeout bounds the whole call
	// (default 3 s).
	Gather, Timeout time.Duration
}

// connzPage is the number of connections asked of a server at once.
const connzPage = 1024

type connzRequest struct {
	Account string `json:"acc"`
	User    string `json:"user,omitempty"`
	Auth    bool   `json:"auth"`
	Offset  int    `json:"offset"`
	Limit   int    `json:"limit"`
	State   int    `json:"state"` // 0: open
}

// connz is the part of a server's CONNZ answer a2ad reads.
type connz struct {
	Total int        `json:"total"`
	Conns []connInfo `json:"connections"`
}

type connInfo struct {
	CID            uint64   `json:"cid"`
	AuthorizedUser string   `json:"authorized_user"`
	Tags           []string `json:"tags"`
}

type serverResponse struct {
	Server struct {
		ID string `json:"id"`
	} `json:"server"`
	Data  *connz `json:"data"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// Conns lists the open connections of agentID (every agent's with "") that
// a2ad authorized, on every server that answers within the time.
func (k *Kicker) Conns(ctx context.Context, agentID string) ([]Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(k.Timeout, 3*time.Second))
	defer cancel()
	req := connzRequest{Account: k.Account, User: agentID, Auth: true, Limit: connzPage}
	first, err := k.gather(ctx, "$SYS.REQ.SERVER.PING.CONNZ", req)
	if err != nil {
		return nil, err
	}
	var out []Conn
	for _, r := range first {
		out = append(out, r.conns()...)
		// A server with more than a page: the rest from it alone.
		for off := len(r.Data.Conns); off < r.Data.Total && len(r.Data.Conns) > 0; {
			req.Offset = off
			more, err := k.ask(ctx, "$SYS.REQ.SERVER."+r.Server.ID+".CONNZ", req)
			if err != nil {
				return out, err
			}
			if more.Data == nil || len(more.Data.Conns) == 0 {
				break
			}
			out = append(out, more.conns()...)
			off += len(more.Data.Conns)
		}
	}
	return out, nil
}

func (r serverResponse) conns() []Conn {
	var out []Conn
	for _, c := range r.Data.Conns {
		jti, iat, ok := credentialOf(c.Tags)
		if !ok || c.AuthorizedUser == "" {
			continue // not authorized by a2ad's callout
		}
		out = append(out, Conn{ServerID: r.Server.ID, CID: c.CID, AgentID: c.AuthorizedUser, JTI: jti, IssuedAt: iat})
	}
	return out
}

// gather publishes req to subject and collects the servers' answers until
// none came for Gather or ctx ends.
func (k *Kicker) gather(ctx context.Context, subject string, req any) ([]serverResponse, error) {
	body, _ := json.Marshal(req)
	inbox := k.NC.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := k.NC.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("system account: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := k.NC.PublishRequest(subject, inbox, body); err != nil {
		return nil, fmt.Errorf("system account: %w", err)
	}
	var out []serverResponse
	gather := cmp.Or(k.Gather, 300*time.Millisecond)
	idle := time.NewTimer(cmp.Or(k.Timeout, 3*time.Second))
	defer idle.Stop()
	for {
		select {
		case m := <-ch:
			r, err := decodeResponse(m)
			if err != nil {
				return out, err
			}
			out = append(out, r)
			idle.Reset(gather)
		case <-idle.C:
			if len(out) == 0 {
				return nil, errors.New("system account: no NATS server answered " + subject)
			}
			return out, nil
		case <-ctx.Done():
			if len(out) == 0 {
				return nil, fmt.Errorf("system account: no NATS server answered %s: %w", subject, ctx.Err())
			}
			return out, nil
		}
	}
}

// ask sends req to one server's subject and returns its answer.
func (k *Kicker) ask(ctx context.Context, subject string, req any) (serverResponse, error) {
	body, _ := json.Marshal(req)
	m, err := k.NC.RequestWithContext(ctx, subject, body)
	if err != nil {
		return serverResponse{}, fmt.Errorf("system account: %s: %w", subject, err)
	}
	return decodeResponse(m)
}

func decodeResponse(m *nats.Msg) (serverResponse, error) {
	if m.Header.Get("Status") == "503" {
		return serverResponse{}, fmt.Errorf("system account: %w (is the user in the system account?)", nats.ErrNoResponders)
	}
	var r serverResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return r, fmt.Errorf("system account: answer is not JSON: %w", err)
	}
	if r.Error != nil {
		return r, fmt.Errorf("system account: server %s: %d %s", r.Server.ID, r.Error.Code, r.Error.Description)
	}
	if r.Data == nil {
		r.Data = &connz{}
	}
	return r, nil
}

// Check proves that the connection can list and close connections on
// the servers: that its user is in the system account and may publish
// $SYS.REQ.SERVER.PING.CONNZ and $SYS.REQ.SERVER.<id>.KICK. (An ordinary
// account's users can list their own account's connections too — the
// server imports CONNZ into every account — but not close any.) It asks
// one server to close a connection that does not exist and expects the
// server's "no such client" answer.
func (k *Kicker) Check(ctx context.Context) error {
	rs, err := k.gather(ctx, "$SYS.REQ.SERVER.PING.CONNZ", connzRequest{Account: k.Account, Limit: 1})
	if err != nil {
		return err
	}
	err = k.Kick(ctx, Conn{ServerID: rs[0].Server.ID, CID: math.MaxUint64})
	switch {
	case errors.Is(err, ErrConnGone):
		return nil
	case errors.Is(err, nats.ErrNoResponders):
		return errors.New("cannot close connections ($SYS.REQ.SERVER.<id>.KICK has no responders): the user is not in the server's system account")
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return errors.New("cannot close connections (no answer to $SYS.REQ.SERVER.<id>.KICK): is the user allowed to publish $SYS.REQ.SERVER.*.KICK?")
	case err == nil:
		return errors.New("cannot tell whether it can close connections: $SYS.REQ.SERVER.<id>.KICK answered without an error for a connection that does not exist")
	}
	return fmt.Errorf("cannot close connections: %w", err)
}

// ErrConnGone is returned by [Kicker.Kick] for a connection its server no
// longer has (closed meanwhile, or by another a2ad instance).
var ErrConnGone = errors.New("connection already closed")

// Kick closes connection c on its server.
func (k *Kicker) Kick(ctx context.Context, c Conn) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(k.Timeout, 3*time.Second))
	defer cancel()
	_, err := k.ask(ctx, "$SYS.REQ.SERVER."+c.ServerID+".KICK", map[string]uint64{"cid": c.CID})
	if err != nil && strings.Contains(err.Error(), "no such client") {
		return ErrConnGone
	}
	return err
}
