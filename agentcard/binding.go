package agentcard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// SelectOptions are what [SelectInterface] needs besides the card: the
// operator's configuration of the agent and where its card came from.
type SelectOptions struct {
	// Prefer is the operator's order of the HTTP bindings a2ad may use
	// ([BindingJSONRPC], [BindingHTTPJSON]; AgentConfig.Bindings): an HTTP
	// interface of another binding is not used. Empty: both, in the card's
	// order.
	Prefer []string
	// CardOrigin is the origin (scheme://host[:port], RFC 6454 §6.2) of the
	// URL the card was fetched from; "" for a card the agent registered
	// over NATS, which vouches for no HTTP origin.
	CardOrigin string
	// AllowedOrigins are further origins an HTTP interface's URL may have
	// (AgentConfig.AllowedOrigins).
	AllowedOrigins []string
}

// maxSelectReasons bounds the interfaces a fault of [SelectInterface]
// names one by one; the rest are counted.
const maxSelectReasons = 8

// SelectInterface chooses the entry of c.SupportedInterfaces a2ad
// delegates over and its binding ([BindingNATS], [BindingJSONRPC],
// [BindingHTTPJSON]), or returns fault, which says why none qualifies, in
// a2ad's words, naming each interface's reason at its JSON pointer
// (/supportedInterfaces/1/url …) and quoting no card text but origins
// made only of the characters a host name has. The rules (issue 16 points
// 1 and 7; A2A 1.0 §5.5 for the binding names):
//
//   - a2ad's NATS binding (protocolBinding [natsbind.BindingURI],
//     protocolVersion 1.0) wins wherever the card offers it, the first such
//     entry (docs/nats-binding.md §3.3);
//   - else an interface with protocolBinding JSONRPC or HTTP+JSON (one of
//     o.Prefer, when set) at protocolVersion 1.0, whose url is absolute,
//     without user info, https (plain http only on a loopback host:
//     localhost, 127.0.0.0/8, ::1), and whose origin is o.CardOrigin or one
//     of o.AllowedOrigins: a card registered over NATS (CardOrigin "")
//     vouches for no origin, so its HTTP interfaces need allowed_origins.
//     Among those, o.Prefer's order decides, then the card's;
//   - GRPC interfaces and interfaces at another protocolVersion (0.3) are
//     never chosen, nor custom bindings a2ad does not speak.
func SelectInterface(c *Card, o SelectOptions) (in Interface, binding string, fault string) {
	return selectInterface(c.SupportedInterfaces, o)
}

func selectInterface(ifaces []Interface, o SelectOptions) (Interface, string, string) {
	for _, in := range ifaces {
		if in.ProtocolBinding == natsbind.BindingURI && in.ProtocolVersion == a2a.Version {
			return in, BindingNATS, ""
		}
	}
	cardOrigin, _ := ParseOrigin(o.CardOrigin)
	allowed := map[string]bool{}
	for _, a := range o.AllowedOrigins {
		if n, err := ParseOrigin(a); err == nil {
			allowed[n] = true
		}
	}
	best, bestRank := -1, 0
	var reasons []string
	for i, in := range ifaces {
		ptr := "/supportedInterfaces/" + strconv.Itoa(i)
		why := httpFault(in, o.Prefer, cardOrigin, allowed)
		if why != "" {
			reasons = append(reasons, ptr+why)
			continue
		}
		rank := len(o.Prefer) // unlisted never gets here when Prefer is set
		if r := slices.Index(o.Prefer, in.ProtocolBinding); r >= 0 {
			rank = r
		}
		if best < 0 || rank < bestRank {
			best, bestRank = i, rank
		}
	}
	if best >= 0 {
		return ifaces[best], ifaces[best].ProtocolBinding, ""
	}
	fault := "card has no supportedInterfaces entry a2ad delegates over (protocolBinding " + natsbind.BindingURI +
		", or JSONRPC or HTTP+JSON over https, at protocolVersion " + a2a.Version + ")"
	if len(reasons) > 0 {
		shown := reasons[:min(len(reasons), maxSelectReasons)]
		fault += ": " + strings.Join(shown, "; ")
		if more := len(reasons) - len(shown); more > 0 {
			fault += "; and " + strconv.Itoa(more) + " more"
		}
	}
	return Interface{}, "", fault
}

// httpFault says why a2ad does not delegate over in as an HTTP interface,
// as "/<member>: <reason>" after the interface's pointer, or "" when it
// may.
func httpFault(in Interface, prefer []string, cardOrigin string, allowed map[string]bool) string {
	switch in.ProtocolBinding {
	case BindingJSONRPC, BindingHTTPJSON:
	case natsbind.BindingURI:
		return "/protocolVersion: a2ad's NATS binding at a protocolVersion other than " + a2a.Version
	case "GRPC":
		return "/protocolBinding: GRPC, which a2ad does not delegate over (only JSONRPC and HTTP+JSON)"
	default:
		return "/protocolBinding: not a binding a2ad speaks (" + natsbind.BindingURI + ", JSONRPC, HTTP+JSON)"
	}
	b := in.ProtocolBinding
	switch {
	case in.ProtocolVersion != a2a.Version:
		return "/protocolVersion: " + b + " at a protocolVersion other than " + a2a.Version + " (a2ad speaks A2A " + a2a.Version + " only)"
	case len(prefer) > 0 && !slices.Contains(prefer, b):
		known := slices.DeleteFunc(slices.Clone(prefer), func(p string) bool { return p != BindingJSONRPC && p != BindingHTTPJSON })
		return "/protocolBinding: " + b + " is not in the agent's configured bindings (" + strings.Join(known, ", ") + ")"
	}
	u, err := url.Parse(in.URL)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return "/url: not an absolute URL with a host"
	case u.User != nil:
		return "/url: carries user info"
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return "/url: plain http, which a2ad uses only on a loopback host (localhost, 127.0.0.0/8, ::1): https is required"
	case u.Scheme != "https" && u.Scheme != "http":
		return "/url: not an https URL"
	}
	origin, err := ParseOrigin(u.Scheme + "://" + u.Host)
	if err != nil {
		return "/url: has no valid origin"
	}
	if origin == cardOrigin || allowed[origin] {
		return ""
	}
	named := "its origin"
	if safeOrigin.MatchString(origin) && len(origin) <= 200 {
		named = "its origin " + origin
	}
	if cardOrigin == "" {
		return "/url: the card was registered over NATS and vouches for no HTTP origin: " + named + " must be in the agent's allowed_origins"
	}
	return "/url: " + named + " is neither the card's origin " + cardOrigin + " nor in the agent's allowed_origins"
}

// safeOrigin is an origin a fault may quote: only the characters of a
// scheme, a host name or IP literal, and a port.
var safeOrigin = regexp.MustCompile(`^https?://[a-z0-9.\-]+(:[0-9]+)?$|^https?://\[[0-9a-f:.]+\](:[0-9]+)?$`)

// loopbackHost reports whether host is localhost or a loopback address:
// where a2ad accepts plain http (as for fetching cards).
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// errOrigin is the reason of every origin [ParseOrigin] refuses.
var errOrigin = errors.New("want an origin scheme://host[:port] (RFC 6454): https, or http on a loopback host (localhost, 127.0.0.0/8, [::1]), with no path, query or user info")

// ParseOrigin returns origin s (scheme://host[:port], RFC 6454 §6.2) in
// its normal form: lower case, without the scheme's default port (443 for
// https, 80 for http). It refuses anything else, and an http origin on a
// host that is not loopback: a2ad reaches agents over https.
func ParseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.ForceQuery {
		return "", errOrigin
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return "", errOrigin
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", errOrigin
		}
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return u.Scheme + "://" + host, nil
}

// OriginOf is the origin of an absolute http(s) URL, as [ParseOrigin]
// returns it; "" when rawURL has none (not http(s), no host, http on a
// host that is not loopback).
func OriginOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return ""
	}
	o, err := ParseOrigin(u.Scheme + "://" + u.Host)
	if err != nil {
		return ""
	}
	return o
}

// checkHTTPConfig refuses an agent configuration whose bindings or
// allowed_origins [SelectInterface] could not apply.
func checkHTTPConfig(a AgentConfig) error {
	var errs []error
	for i, b := range a.Bindings {
		switch {
		case b != BindingJSONRPC && b != BindingHTTPJSON:
			errs = append(errs, fmt.Errorf("bindings[%d]: want %s or %s, got %q", i, BindingJSONRPC, BindingHTTPJSON, truncate(b, 64)))
		case slices.Index(a.Bindings, b) < i:
			errs = append(errs, fmt.Errorf("bindings[%d]: %s is listed twice", i, b))
		}
	}
	for i, o := range a.AllowedOrigins {
		if _, err := ParseOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("allowed_origins[%d]: %w, got %q", i, err, truncate(o, 128)))
		}
	}
	switch a.OutboundAuth {
	case AuthNone, AuthBearer, AuthOAuth2:
	default:
		errs = append(errs, fmt.Errorf("outbound auth %q is not %q, %q or %q", truncate(a.OutboundAuth, 32), AuthNone, AuthBearer, AuthOAuth2))
	}
	return errors.Join(errs...)
}

// CheckHTTPConfig returns the faults of a's bindings and allowed_origins,
// one a line as errors.Join joins them, each naming its key
// ("bindings[1]: want JSONRPC or HTTP+JSON, got \"GRPC\""); nil when
// [NewRegistry] accepts them.
func CheckHTTPConfig(a AgentConfig) error { return checkHTTPConfig(a) }

// ErrNATSAgent means [Registry.HTTPTarget] was asked for an agent a2ad
// delegates to over its NATS binding.
var ErrNATSAgent = errors.New("agentcard: agent is delegated to over NATS, not HTTP")

// HTTPAgent is what the HTTP binding needs of one delegable agent
// (httpbind.Target is built from it).
type HTTPAgent struct {
	AgentID string
	// Binding is [BindingJSONRPC] or [BindingHTTPJSON]; Interface is the
	// card's entry [SelectInterface] chose (its url, tenant).
	Binding   string
	Interface Interface
	// Capabilities are the card's (streaming, pushNotifications).
	Capabilities Capabilities
	// CardOrigin is the origin the card was fetched from; "" when the
	// agent registered it over NATS.
	CardOrigin string
}

// HTTPTarget returns how a2ad reaches agentID over HTTP, from its record
// as [Registry.ForDelegation] reads it (memory, else the bucket), for any
// tenant. Errors: [ErrAgentNotFound] for an agent neither stored nor
// configured; *[NotDelegableError] for one that is not delegable now
// (pending, quarantined, no usable interface, a required signature that
// does not verify); [ErrNATSAgent] for one delegated to over NATS. An
// agent that is only offline ([ReachabilityOffline]) has its target: its
// tasks are still delivered to, and it is probed there.
func (r *Registry) HTTPTarget(ctx context.Context, agentID string) (HTTPAgent, error) {
	v, rec, err := r.viewedAgent(ctx, agentID)
	if err != nil {
		return HTTPAgent{}, err
	}
	switch {
	case rec == nil:
		return HTTPAgent{}, ErrAgentNotFound
	case !rec.Delegable && !rec.offline:
		return HTTPAgent{}, &NotDelegableError{AgentID: agentID, Reason: rec.NotDelegableReason}
	case v.cardErr != nil:
		return HTTPAgent{}, v.cardErr
	case rec.Binding == BindingNATS || rec.Interface == nil:
		return HTTPAgent{}, fmt.Errorf("%w: %s", ErrNATSAgent, agentID)
	}
	return HTTPAgent{AgentID: agentID, Binding: rec.Binding, Interface: *rec.Interface,
		Capabilities: v.card.Capabilities, CardOrigin: rec.CardOrigin}, nil
}
