package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/nats-io/nats.go"
)

// register answers a registration (docs/nats-binding.md §9): the request
// must carry the agent's credential (Authorization: Bearer …) and register
// the card under the credential's own agent id. Beyond the rate of the
// agent its credential proves (registrationLimits), it is answered
// rate_limited before anything else of it is read.
func (d *Daemon) register(m *nats.Msg) {
	cred, credErr := d.credential(m.Header)
	if errors.Is(credErr, errVerifyBudget) {
		d.obs.registered("", "dropped")
		return // no answer: the sender retries, as after a timeout
	}
	if ok, wait, limit := d.registrations.take(cred, time.Now()); !ok {
		d.rateLimited(m, cred, wait, limit)
		return
	}
	var req natsbind.RegisterRequest
	resp := natsbind.RegisterResponse{}
	replyAs := "" // the agent whose inbox may receive the answer
	if err := json.Unmarshal(m.Data, &req); err != nil {
		resp.Code, resp.Error = natsbind.RegisterInvalid, "registration must be {\"agentId\":…, \"card\":…}"
	} else if err := registrant(cred, credErr, req.AgentID); err != nil {
		replyAs = cmp.Or(cred, req.AgentID)
		resp.AgentID = req.AgentID
		resp.Code, resp.Error = natsbind.RegisterUnauthenticated, err.Error()
		if errors.Is(err, errAgentIDMismatch) {
			resp.Code = natsbind.RegisterForbidden
		}
		if errors.Is(err, agentcred.ErrRevoked) {
			resp.Code = natsbind.RegisterRevoked
		}
		d.aggregate.logAttrs(cred, slog.LevelWarn, "agent registration refused", "agent", safeID(req.AgentID), "credential_agent", cred,
			"code", resp.Code, "err", err)
		// The actor is the agent the credential speaks for: none when it
		// did not verify (the claimed id is only the record's agent id).
		d.obs.agentCard(cred, audit.Actor{Type: audit.ActorAgent, Subject: cred}, req.AgentID, nil, false, resp.Code)
	} else if replyAs = req.AgentID; !agentInbox(m.Reply, replyAs) {
		// Checked before registering: nothing a request without a proper
		// inbox asks for is done.
	} else {
		resp.AgentID = req.AgentID
		rec, changed, err := d.Service.Agents.RegisterChanged(context.Background(), req.AgentID, req.Card)
		by := audit.Actor{Type: audit.ActorAgent, Subject: req.AgentID}
		if err != nil {
			resp.Code, resp.Error = natsbind.RegisterInvalid, err.Error()
			d.aggregate.logAttrs(cred, slog.LevelWarn, "agent registration refused", "agent", req.AgentID, "err", err)
			d.obs.agentCard(cred, by, req.AgentID, nil, false, cardRefusalCode(err))
		} else {
			resp.Status, resp.Fingerprint = string(rec.Status), rec.Fingerprint
			d.cardLog(cred, changed, "agent registered", "agent", rec.AgentID, "status", rec.Status, "fingerprint", rec.Fingerprint)
			if changed {
				d.warnConfiguredSkills(rec)
			}
			d.obs.agentCard(cred, by, req.AgentID, rec, changed, "")
		}
	}
	d.obs.registered(cred, cmp.Or(resp.Code, resp.Status, "ignored"))
	// a2ad's own connection may publish anywhere, so the reply subject,
	// which the sender chose, is confined to that agent's inbox: never a
	// KV key, a stream, another agent's subjects.
	if !agentInbox(m.Reply, replyAs) {
		d.aggregate.logAttrs(cred, slog.LevelWarn, "registration ignored: its reply subject is not the agent's inbox", "agent", safeID(replyAs),
			"want_prefix", embedded.AgentInboxPrefix(safeID(replyAs))+".")
		return
	}
	b, _ := json.Marshal(resp)
	_ = m.Respond(b)
}

// rateLimited answers a registration beyond its rate (limit a minute; the
// next one is allowed after wait) and writes nothing else: no log line, no
// audit record, only the metric. Of the registrations of one bucket beyond
// its rate, one a second is answered; the others get no answer at all
// (their requests time out), so that a flood costs a2ad no publishes to
// subjects the agent chose. The answer goes where any other would:
// into the inbox of the agent the credential proves or, without a verified
// credential, of the agent the registration claims — which a2ad has not
// read, so of any agent the reply subject names (the claim is the sender's
// choice, so this allows no other subject).
func (d *Daemon) rateLimited(m *nats.Msg, cred string, wait time.Duration, limit int) {
	d.obs.registered(cred, natsbind.RegisterRateLimited)
	if !d.registrations.mayAnswer(cred, time.Now()) {
		return // answered once this second already
	}
	replyAs := cred
	if replyAs == "" {
		replyAs = inboxAgent(m.Reply)
	}
	if !agentInbox(m.Reply, replyAs) {
		return
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	whose := "of agent " + cred
	if cred == "" {
		whose = "without a verified agent credential, together,"
	}
	b, _ := json.Marshal(natsbind.RegisterResponse{AgentID: cred, Code: natsbind.RegisterRateLimited, RetryAfterSeconds: secs,
		Error: fmt.Sprintf("registrations %s are limited to %d a minute: retry in %ds", whose, limit, secs)})
	_ = m.Respond(b)
}

// inboxAgent is the agent id X of an inbox subject _INBOX_X.…, else "".
func inboxAgent(subject string) string {
	rest, ok := strings.CutPrefix(subject, embedded.AgentInboxPrefix(""))
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ".")
	return id
}

// agentInbox reports whether subject is in agentID's inbox,
// _INBOX_<agentId>.<token>… (docs/nats-binding.md §10).
func agentInbox(subject, agentID string) bool {
	if !natsbind.ValidToken(agentID) {
		return false
	}
	rest, ok := strings.CutPrefix(subject, embedded.AgentInboxPrefix(agentID)+".")
	if !ok || rest == "" {
		return false
	}
	for _, tok := range strings.Split(rest, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t") {
			return false
		}
	}
	return true
}

var (
	errAgentIDMismatch = errors.New("the credential is for another agent id")
	errNoCredential    = errors.New("no credential")
	errVerifyBudget    = errors.New("too many unknown credentials to verify")
)

// Credentials a2ad has not verified before cost an Ed25519 check each
// (about 50 µs); registrations carrying them are checked at most
// unknownCredentialsPerSecond a second (with a burst of as many), and the
// others dropped unanswered: a flood of forged credentials costs a bounded
// share of one core, and a known credential, the honest agent's, is never
// held up by it.
const unknownCredentialsPerSecond = 500

// credential returns the agent id of the registration's credential once
// it verified; errNoCredential if there is none.
func (d *Daemon) credential(h nats.Header) (string, error) {
	tok, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", errNoCredential
	}
	if !d.AgentKeys.Known(tok) && !d.unknownCredentials.Allow() {
		return "", errVerifyBudget
	}
	c, err := d.AgentKeys.Verify(tok)
	if err != nil {
		return "", err
	}
	return c.AgentID, nil
}

// registrant checks that the registration of agentID may register it: its
// credential (cred, verified, or credErr) is agentID's.
func registrant(cred string, credErr error, agentID string) error {
	switch {
	case errors.Is(credErr, errNoCredential):
		return errors.New("registration needs the agent's credential in Authorization: Bearer … (mint it with `a2ad agents credential " + safeID(agentID) + " --out FILE`)")
	case credErr != nil:
		return credErr
	case cred != agentID:
		return fmt.Errorf("%w: it names %s, the registration %s", errAgentIDMismatch, cred, safeID(agentID))
	}
	return nil
}

// safeID returns id if it is a valid agent id, else a placeholder: the
// registration's agentId is agent text and goes into answers and logs.
func safeID(id string) string {
	if natsbind.ValidToken(id) {
		return id
	}
	return "ID"
}

// cardLog logs an agent's registration or fetched card: at once if it
// changed the agent's status or fingerprint, else aggregated with the
// others of source.
func (d *Daemon) cardLog(source string, changed bool, msg string, args ...any) {
	if changed {
		d.log.Info(msg, args...)
		return
	}
	d.aggregate.logAttrs(source, slog.LevelInfo, msg, args...)
}

// watchCard fetches agent id's card from url until ctx ends, and registers
// each new card; an [agentcard.Refresh] says when to fetch again: as the
// card's Cache-Control says, with its ETag (If-None-Match), and with backoff
// after a refused card or a failed fetch, revalidating the refused card by
// its ETag. A card that changes the agent's status or fingerprint is
// logged and recorded at once; a refetch of the current card is not an
// event. A refusal (or failed fetch) is logged and audited once per change
// of its reason, not at every retry; each one is the agent's LastRefusal.
func (d *Daemon) watchCard(ctx context.Context, id, url string) {
	f := &agentcard.Fetcher{}
	var refresh agentcard.Refresh
	byDaemon := audit.Actor{Type: audit.ActorDaemon}
	for {
		res, err := f.Fetch(ctx, url, refresh.ETag)
		fetchErr := err
		var rec *agentcard.Record
		changed := false
		if err == nil && !res.NotModified {
			rec, changed, err = d.Service.Agents.RegisterFetched(ctx, id, res.Card, url)
		}
		if ctx.Err() != nil {
			return
		}
		wait, news := refresh.Next(res, err, time.Now())
		switch {
		case err != nil:
			msg, code := "fetched agent card refused", cardRefusalCode(err)
			if fetchErr != nil {
				msg, code = "agent card not fetched", "fetch_failed"
			}
			d.Service.Agents.NoteRefusal(id, agentcard.RefusalFetch, err)
			if _, refusal := agentcard.RefusalReason(err); !refusal {
				d.aggregate.logAttrs(id, slog.LevelWarn, msg, "agent", id, "url", url, "err", err, "retry_in", wait)
			} else if news {
				d.log.Warn(msg, "agent", id, "url", url, "err", err, "retry_in", wait)
				d.obs.agentCard(id, byDaemon, id, nil, true, code)
			}
		case rec != nil:
			d.cardLog(id, changed, "agent card fetched", "agent", rec.AgentID, "status", rec.Status, "fingerprint", rec.Fingerprint)
			if changed {
				d.obs.agentCard(id, byDaemon, id, rec, true, "")
				d.warnConfiguredSkills(rec)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// configuredSkills returns the skill ids a's configuration names, each
// with the keys naming it (agentcard.AgentConfig.ConfiguredSkills).
func configuredSkills(a AgentConfig) map[string][]string {
	out := map[string][]string{}
	for skill := range a.EvidenceSchemas {
		out[skill] = append(out[skill], "evidence_schemas")
	}
	for skill := range a.EvidenceKeys {
		out[skill] = append(out[skill], "evidence_keys")
	}
	for skill := range a.OutputSchemas {
		if skill != "*" {
			out[skill] = append(out[skill], "output_schemas")
		}
	}
	return out
}

// warnConfiguredSkills logs a warning for each skill id the agent's
// configuration names that its card (rec, as registered) does not declare:
// the configured evidence check then applies to no skill
// (agentcard.ConfiguredSkillNotes; the same text is a note on the agent).
func (d *Daemon) warnConfiguredSkills(rec *agentcard.Record) {
	var card *agentcard.Card
	if len(rec.Card) > 0 {
		card, _ = agentcard.Parse(rec.Card)
	}
	if card == nil {
		return
	}
	for _, a := range d.Config.Agents {
		if a.ID != rec.AgentID {
			continue
		}
		for _, n := range agentcard.ConfiguredSkillNotes(agentcard.AgentConfig{ConfiguredSkills: configuredSkills(a)}, card) {
			d.log.Warn("agent configuration names a skill its card does not declare", "agent", rec.AgentID, "note", n.Reason)
		}
	}
}
