package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/nats-io/nats.go/jetstream"
)

// RevocationsBucket holds the agent credentials revoked before their
// expiry, shared by every instance (each watches it and applies a change
// within a moment):
//
//	agent.<agentId>        {"revoked_before":"<RFC 3339>"}  every credential of the agent issued (iat) before that time
//	cred.<agentId>.<jti>   {"revoked_at":"<RFC 3339>"}      one credential
//
// It is bounded: one key per agent, at most agentcred.MaxRevokedPerAgent
// cred keys per agent (a revocation of all its credentials deletes them),
// and every key expires agentcred.MaxTTL (plus a day) after it was last
// written, when every credential it revokes has expired anyway.
const RevocationsBucket = "a2ad_revocations"

// revocationsMaxAge is how long a revocation is kept.
const revocationsMaxAge = agentcred.MaxTTL + 24*time.Hour

// ErrRevocationInvalid is wrapped by a revocation refused for its input.
var ErrRevocationInvalid = errors.New("revocation refused")

type agentRevocation struct {
	RevokedBefore time.Time `json:"revoked_before"`
}

type credentialRevocation struct {
	RevokedAt time.Time `json:"revoked_at"`
}

// openRevocations opens (creating it on first use) [RevocationsBucket],
// loads every revocation into d.revocations before it returns, and keeps
// applying changes until runCtx ends: each one closes, on the embedded
// server, the live connections of the credentials it revokes.
func (d *Daemon) openRevocations(ctx, runCtx context.Context, js jetstream.JetStream, replicas int) error {
	err := jsretry.Do(ctx, time.Minute, func() (err error) {
		d.revocationsKV, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: RevocationsBucket,
			Description: "agent credentials revoked before their expiry (a2ad agents revoke)", History: 1,
			TTL: revocationsMaxAge, Replicas: max(1, replicas), Storage: jetstream.FileStorage})
		return err
	})
	if err != nil {
		return fmt.Errorf("KV bucket %s: %w", RevocationsBucket, err)
	}
	w, err := d.revocationsKV.WatchAll(runCtx)
	if err != nil {
		return fmt.Errorf("KV bucket %s: watch: %w", RevocationsBucket, err)
	}
	for loaded := false; !loaded; {
		select {
		case <-ctx.Done():
			_ = w.Stop()
			return fmt.Errorf("KV bucket %s: loading revocations: %w", RevocationsBucket, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("KV bucket %s: watch closed while loading", RevocationsBucket)
			}
			if e == nil {
				loaded = true
				break
			}
			d.applyRevocation(e)
		}
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-runCtx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				if agent := d.applyRevocation(e); agent != "" && e.Operation() == jetstream.KeyValuePut {
					d.log.Info("agent credentials revoked", "agent", agent, "revision", e.Revision())
					d.cutOff(runCtx)
				}
			}
		}
	}()
	return nil
}

// applyRevocation applies one entry of the bucket to d.revocations and
// returns its agent id ("" for a key a2ad does not write).
func (d *Daemon) applyRevocation(e jetstream.KeyValueEntry) string {
	del := e.Operation() != jetstream.KeyValuePut
	parts := strings.Split(e.Key(), ".")
	switch {
	case len(parts) == 2 && parts[0] == "agent" && natsbind.ValidToken(parts[1]):
		if del {
			d.revocations.ClearAgent(parts[1])
			return parts[1]
		}
		var v agentRevocation
		if err := json.Unmarshal(e.Value(), &v); err != nil || v.RevokedBefore.IsZero() {
			d.log.Error("revocation not applied: malformed value", "bucket", RevocationsBucket, "key", e.Key())
			return ""
		}
		d.revocations.SetAgent(parts[1], v.RevokedBefore)
		return parts[1]
	case len(parts) == 3 && parts[0] == "cred" && natsbind.ValidToken(parts[1]) && agentcred.ValidJTI(parts[2]):
		if del {
			d.revocations.RemoveCredential(parts[2])
		} else {
			d.revocations.AddCredential(parts[1], parts[2])
		}
		return parts[1]
	}
	return ""
}

// cutOff closes every agent connection whose credential is revoked now,
// at once and twice more in the next three seconds (a connection being
// authenticated while the revocation arrived is listed by then): on the
// embedded server, or through the system account on an external NATS
// whose auth callout a2ad serves (nats_auth_callout.system_url). Without
// either a2ad has no hold on agents' connections: they connect with their
// own NATS users.
func (d *Daemon) cutOff(ctx context.Context) {
	if d.ns == nil && d.kicker == nil {
		return
	}
	sweep := func() {
		if d.ns == nil {
			d.cutOffExternal(ctx)
			return
		}
		for agent, n := range embedded.CloseRefused(d.ns, &d.sessions, d.verifyAgent) {
			for range n {
				d.obs.agentDisconnected(agent, "revoked")
			}
			d.log.Warn("agent connections closed: credential revoked", "agent", agent, "closed", n)
		}
	}
	waits := []time.Duration{time.Second, 2 * time.Second}
	if d.ns != nil {
		sweep()
	} else {
		// Through the system account a sweep waits for every server's
		// answer: not on the watcher's goroutine.
		waits = append([]time.Duration{0}, waits...)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for _, wait := range waits {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			sweep()
		}
	}()
}

// Revoke revokes, on every instance, the credentials of agentID before
// their expiry: the one whose jti is jti, or with jti "" every one issued
// until now. It returns the time before which all were revoked (zero for
// one jti). It waits until the revocation is stored (replicated), not
// until every instance applied it (each does within a moment of its
// watcher's delivery); this instance closes the live connections it can
// reach (cutOff) at once, without waiting for its own watcher. Errors wrap ErrRevocationInvalid for bad input
// (agentcred.ErrTooManyRevoked too when the agent has too many jtis
// revoked one by one: the bound holds per instance, so instances revoking
// at the same moment may together store a few more), else are the
// store's.
func (d *Daemon) Revoke(ctx context.Context, agentID, jti string) (time.Time, error) {
	if !natsbind.ValidToken(agentID) {
		return time.Time{}, fmt.Errorf("%w: agent id: want 1 to 128 of [A-Za-z0-9_-]", ErrRevocationInvalid)
	}
	if jti != "" {
		if !agentcred.ValidJTI(jti) {
			return time.Time{}, fmt.Errorf("%w: credential: want the 32 hex digits of a credential's jti (printed when it was minted; in its agent.credential_issued audit record)", ErrRevocationInvalid)
		}
		if n := len(d.revocations.Credentials(agentID)); n >= agentcred.MaxRevokedPerAgent {
			return time.Time{}, fmt.Errorf("%w: %w", ErrRevocationInvalid, agentcred.ErrTooManyRevoked)
		}
		b, _ := json.Marshal(credentialRevocation{RevokedAt: time.Now().UTC()})
		if err := jsretry.Do(ctx, revokeRetry, func() error { _, err := d.revocationsKV.Put(ctx, "cred."+agentID+"."+jti, b); return err }); err != nil {
			return time.Time{}, fmt.Errorf("storing the revocation: %w", err)
		}
		d.revocations.AddCredential(agentID, jti) // here at once; the watcher applies it again
		d.cutOff(d.runCtx)
		return time.Time{}, nil
	}
	before := agentcred.RevokedBefore(time.Now())
	b, _ := json.Marshal(agentRevocation{RevokedBefore: before})
	key := "agent." + agentID
	for {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		var e jetstream.KeyValueEntry
		err := jsretry.Do(ctx, revokeRetry, func() (err error) { e, err = d.revocationsKV.Get(ctx, key); return err })
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			err = jsretry.Do(ctx, revokeRetry, func() error { _, err := d.revocationsKV.Create(ctx, key, b); return err })
		case err == nil:
			var cur agentRevocation
			if json.Unmarshal(e.Value(), &cur) == nil && !cur.RevokedBefore.Before(before) {
				before = cur.RevokedBefore // another instance revoked as late or later
				break
			}
			err = jsretry.Do(ctx, revokeRetry, func() error { _, err := d.revocationsKV.Update(ctx, key, b, e.Revision()); return err })
		}
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
			continue // another instance wrote it meanwhile: read again
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("storing the revocation: %w", err)
		}
		break
	}
	d.revocations.SetAgent(agentID, before)
	// Not left to this instance's watcher: its consumer may have been on a
	// node just lost and resumes only after missed heartbeats and a new
	// meta leader (measured: over 5 s on a three-node cluster).
	d.cutOff(d.runCtx)
	// The credentials revoked one by one are covered now.
	for _, j := range d.revocations.Credentials(agentID) {
		if err := d.revocationsKV.Delete(ctx, "cred."+agentID+"."+j); err != nil {
			d.log.Warn("revocation of one credential not deleted (it expires on its own)", "agent", agentID, "jti", j, "err", err)
		}
	}
	return before, nil
}

// revokeRetry is how long a revocation's writes are retried through a
// cluster's leader election (a node down: "no responders" for a few
// seconds) before the operator gets the error.
const revokeRetry = 15 * time.Second

// isWrongSequence reports a KV update refused for a stale revision.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// AgentRevokedBefore reads from [RevocationsBucket] the time before which
// every credential of agentID is revoked (false: none; no bucket yet is
// none): for minting without a running a2ad (`a2ad agents credential
// --nats-url`), whose keys then mint past it (agentcred.Keys.MintClaims).
func AgentRevokedBefore(ctx context.Context, js jetstream.JetStream, agentID string) (time.Time, bool, error) {
	kv, err := js.KeyValue(ctx, RevocationsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("KV bucket %s: %w", RevocationsBucket, err)
	}
	e, err := kv.Get(ctx, "agent."+agentID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("KV bucket %s: %w", RevocationsBucket, err)
	}
	var v agentRevocation
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return time.Time{}, false, fmt.Errorf("KV bucket %s: key %s: %w", RevocationsBucket, e.Key(), err)
	}
	return v.RevokedBefore, true, nil
}
