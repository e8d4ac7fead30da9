package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// NATSAuthCalloutConfig is the nats_auth_callout block: a2ad as the auth
// callout service (ADR-26) of an external NATS server in configuration
// mode. The server's config names the issuer's public key, a2ad's own
// users as auth_users and the account (deploy/nats-cluster/auth-callout.conf):
//
//	authorization { auth_callout { issuer: A…, account: A2A, auth_users: [a2ad, a2ad-system] } }
type NATSAuthCalloutConfig struct {
	// IssuerSeedFile holds the seed (SA…, as `nk -gen account` prints it)
	// of the account nkey whose public key is the server's
	// auth_callout.issuer; a2ad signs its answers and the agents' user
	// JWTs with it. Setting it turns the callout on. Keep it readable by
	// a2ad only: whoever holds it can let anyone into the account.
	IssuerSeedFile string `yaml:"issuer_seed_file"`
	// XKeySeedFile, if set, holds the seed (SX…, `nk -gen curve`) of the
	// curve key whose public key is the server's auth_callout.xkey: the
	// server then seals each request (it carries the agent's credential)
	// for a2ad and a2ad seals its answer.
	XKeySeedFile string `yaml:"xkey_seed_file"`
	// Account is the server's account that agents are placed in, the one
	// a2ad's own user is in (its JetStream and subjects). Default "A2A",
	// as in deploy/nats-cluster.
	Account string `yaml:"account"`
	// SystemURL is a NATS URL of a user of the server's system account,
	// allowed to publish $SYS.REQ.SERVER.PING.CONNZ and
	// $SYS.REQ.SERVER.*.KICK: through it a2ad closes, on every server of
	// the cluster, the live connections of a revoked credential (at once,
	// and every 30 s those missed). Like nats_url it lists every server:
	// over plain text nats.go learns no others. a2ad refuses to start
	// when the user cannot close connections. Its password is best given
	// in the environment variable A2AD_NATS_SYSTEM_URL. nats_tls applies
	// to it as to nats_url. Empty:
	// a revoked credential is refused at connect and at registration, its
	// live connections stay open until it expires, and revoking all of an
	// agent's credentials quarantines the agent.
	SystemURL string `yaml:"system_url"`
}

// DefaultCalloutAccount is nats_auth_callout.account's default.
const DefaultCalloutAccount = "A2A"

// enabled reports whether the block turns the callout on.
func (c NATSAuthCalloutConfig) enabled() bool { return c.IssuerSeedFile != "" }

// keys checks the block and reads its keys (nil, nil when it is off).
func (c Config) calloutKeys() (issuer, xkey nkeys.KeyPair, err error) {
	a := c.NATSAuthCallout
	if !a.enabled() {
		if a.XKeySeedFile != "" || a.SystemURL != "" || a.Account != "" {
			return nil, nil, errors.New("config: nats_auth_callout needs issuer_seed_file (the account seed whose public key is the NATS server's auth_callout.issuer)")
		}
		return nil, nil, nil
	}
	if c.NATSURL == "" {
		return nil, nil, errors.New("config: nats_auth_callout is for an external NATS server (nats_url); the embedded server checks agent credentials itself")
	}
	issuer, err = readSeed("nats_auth_callout.issuer_seed_file", a.IssuerSeedFile, nkeys.PrefixByteAccount, "an account seed (SA…, `nk -gen account`)")
	if err != nil {
		return nil, nil, err
	}
	if a.XKeySeedFile != "" {
		if xkey, err = readSeed("nats_auth_callout.xkey_seed_file", a.XKeySeedFile, nkeys.PrefixByteCurve, "a curve seed (SX…, `nk -gen curve`)"); err != nil {
			return nil, nil, err
		}
	}
	if strings.ContainsAny(a.Account, " \t\r\n.*>") {
		return nil, nil, fmt.Errorf("config: nats_auth_callout.account %q: want an account name of the NATS server, without spaces, dots or wildcards", a.Account)
	}
	return issuer, xkey, nil
}

// readSeed reads an nkey seed file that must hold a seed of kind prefix.
func readSeed(key, path string, prefix nkeys.PrefixByte, want string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", key, err)
	}
	seed := []byte(strings.TrimSpace(string(b)))
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("config: %s %s: want %s", key, path, want)
	}
	if p, _, err := nkeys.DecodeSeed(seed); err != nil || p != prefix {
		return nil, fmt.Errorf("config: %s %s: want %s", key, path, want)
	}
	return kp, nil
}

// startCallout answers the NATS server's authorization requests on d.nc,
// and connects to the system account when system_url is set.
func (d *Daemon) startCallout(ctx, runCtx context.Context, issuer, xkey nkeys.KeyPair) error {
	a := d.Config.NATSAuthCallout
	account := a.Account
	if account == "" {
		account = DefaultCalloutAccount
	}
	if a.SystemURL != "" {
		if n, m := len(strings.Split(a.SystemURL, ",")), len(strings.Split(d.Config.NATSURL, ",")); n < m {
			d.log.Warn("nats_auth_callout.system_url lists fewer NATS servers than nats_url: while those are down, a revoked credential's connections cannot be closed; list every server", "system_url", n, "nats_url", m)
		}
		nc, err := nats.Connect(a.SystemURL, append(d.Config.NATSTLS.clientOptions(a.SystemURL), nats.Name("a2ad-system"), nats.MaxReconnects(-1),
			nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(true), natsErrors(d.aggregate))...)
		if err == nil && !nc.IsConnected() {
			err = awaitNATS(ctx, nc, d.Config.NATSTLS)
		}
		if err == nil && !nc.IsConnected() {
			// An authorization violation closes the connection for good.
			err = errors.New("not connected within a minute")
			if last := nc.LastError(); last != nil {
				err = last
			}
		}
		if err != nil {
			if nc != nil {
				nc.Close()
			}
			return fmt.Errorf("nats_auth_callout.system_url %s: %w", RedactURLs(a.SystemURL), err)
		}
		d.systemNC = nc
		d.kicker = &natsauth.Kicker{NC: nc, Account: account}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = d.kicker.Check(cctx)
		cancel()
		if err != nil {
			return fmt.Errorf("nats_auth_callout.system_url %s: %w", RedactURLs(a.SystemURL), err)
		}
	}
	c := &natsauth.Callout{Issuer: issuer, XKey: xkey, Account: account, Authorize: d.authorizeConnect,
		Refused: func(remote string, err error) {
			d.obs.natsRefused(err)
			d.aggregate.logAttrs("nats refused: "+natsRefusalCode(err), slog.LevelWarn, "NATS connection refused", "remote", remote, "reason", err)
		}}
	sub, err := c.Serve(d.nc)
	if err == nil {
		err = d.nc.FlushTimeout(10 * time.Second)
	}
	if err != nil {
		return fmt.Errorf("nats_auth_callout: subscribing to %s: %w", natsauth.Subject, err)
	}
	d.callout = sub
	if d.kicker != nil {
		d.wg.Add(1)
		go d.sweepExternal(runCtx)
	}
	pub, _ := issuer.PublicKey()
	if d.kicker != nil {
		d.log.Info("NATS auth callout: agents connect with their a2ad credential; revoked ones are cut off through the system account", "account", account, "issuer", pub)
	} else {
		d.log.Warn("NATS auth callout without nats_auth_callout.system_url: a revoked credential is refused at connect, but its live connections stay open until it expires", "account", account, "issuer", pub)
	}
	return nil
}

// authorizeConnect decides one CONNECT the server handed to the callout,
// as the embedded server's authentication does.
func (d *Daemon) authorizeConnect(c natsauth.Connect) (natsauth.Grant, error) {
	if c.Token == "" {
		return natsauth.Grant{}, errors.New("no agent credential (connect with the credential from `a2ad agents credential ID --out FILE` as the token)")
	}
	k := d.keys.Load()
	if k == nil {
		return natsauth.Grant{}, errors.New("a2ad is starting: agent credentials are not accepted yet")
	}
	cl, err := k.Verify(c.Token)
	if err != nil {
		return natsauth.Grant{}, err
	}
	if c.User != "" && c.User != cl.AgentID {
		return natsauth.Grant{}, fmt.Errorf("user %q is not the credential's agent id %q", c.User, cl.AgentID)
	}
	return natsauth.Grant{AgentID: cl.AgentID, JTI: cl.ID, IssuedAt: cl.IssuedAt, Expires: cl.Expires,
		Permissions: embedded.AgentPermissions(cl.AgentID), MaxPayload: embedded.MaxPayload,
		MaxSubscriptions: int64(d.Config.NATSLimits.serverLimits(len(d.Config.Agents)).MaxSubscriptions)}, nil
}

// externalSweepInterval is how often every instance looks, on an external
// NATS with system_url, for connections of revoked credentials that the
// sweeps right after a revocation missed (the system account's server was
// down, a connection authorized in the same moment).
const externalSweepInterval = 30 * time.Second

// sweepExternal runs cutOffExternal every externalSweepInterval until ctx
// ends.
func (d *Daemon) sweepExternal(ctx context.Context) {
	defer d.wg.Done()
	t := time.NewTicker(externalSweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.cutOffExternal(ctx)
		}
	}
}

// cutOffExternal closes, on every server of the external NATS, the agent
// connections a2ad's callout authorized whose credential is revoked now.
// A failure is logged once per sweep; the next sweep tries again.
func (d *Daemon) cutOffExternal(ctx context.Context) {
	conns, err := d.kicker.Conns(ctx, "")
	if err != nil {
		d.log.Error("revoked credentials: listing agent connections through the system account failed; trying again within 30 s", "err", err)
	}
	closed := map[string]int{}
	for _, c := range conns {
		if d.revocations.Check(agentcred.Claims{AgentID: c.AgentID, ID: c.JTI, IssuedAt: c.IssuedAt}) == nil {
			continue
		}
		if err := d.kicker.Kick(ctx, c); errors.Is(err, natsauth.ErrConnGone) {
			continue
		} else if err != nil {
			// Not this connection's doing (no responders, no permission, a
			// timeout): the others would fail alike.
			d.log.Error("revoked credentials: closing connections through the system account failed; trying again within 30 s", "agent", c.AgentID, "server", c.ServerID, "err", err)
			break
		}
		closed[c.AgentID]++
	}
	for agent, n := range closed {
		for range n {
			d.obs.agentDisconnected(agent, "revoked")
		}
		d.log.Warn("agent connections closed: credential revoked", "agent", agent, "closed", n)
	}
}
