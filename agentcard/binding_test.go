package agentcard

import (
	"errors"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/internal/natsbind"
)

func iface(url, binding, version string) Interface {
	return Interface{URL: url, ProtocolBinding: binding, ProtocolVersion: version}
}

var (
	natsIface    = iface("nats://127.0.0.1:4222/a2a.agent.fraud-review", natsbind.BindingURI, "1.0")
	jsonrpcIface = iface("https://rpc.vendor.example/a2a/v1", BindingJSONRPC, "1.0")
	restIface    = iface("https://rpc.vendor.example/a2a/rest", BindingHTTPJSON, "1.0")
)

const noneQualifies = "card has no supportedInterfaces entry a2ad delegates over (protocolBinding urn:a2ad:binding:nats:v1, or JSONRPC or HTTP+JSON over https, at protocolVersion 1.0): "

func TestSelectInterface(t *testing.T) {
	const vendor = "https://rpc.vendor.example"
	tests := []struct {
		name    string
		ifaces  []Interface
		o       SelectOptions
		want    Interface
		binding string
		fault   string
	}{
		{"NATS beside HTTP: NATS, wherever it is listed", []Interface{jsonrpcIface, natsIface}, SelectOptions{CardOrigin: vendor},
			natsIface, BindingNATS, ""},
		{"only JSONRPC over https at the card's origin", []Interface{jsonrpcIface}, SelectOptions{CardOrigin: vendor},
			jsonrpcIface, BindingJSONRPC, ""},
		{"the card's order without a preference", []Interface{restIface, jsonrpcIface}, SelectOptions{CardOrigin: vendor},
			restIface, BindingHTTPJSON, ""},
		{"the operator's preference before the card's order", []Interface{jsonrpcIface, restIface},
			SelectOptions{CardOrigin: vendor, Prefer: []string{BindingHTTPJSON, BindingJSONRPC}}, restIface, BindingHTTPJSON, ""},
		{"a binding the operator did not list is not used", []Interface{restIface},
			SelectOptions{CardOrigin: vendor, Prefer: []string{BindingJSONRPC}}, Interface{}, "",
			noneQualifies + "/supportedInterfaces/0/protocolBinding: HTTP+JSON is not in the agent's configured bindings (JSONRPC)"},
		{"origin compared in normal form (case, default port)", []Interface{iface("https://RPC.Vendor.Example:443/a2a", BindingJSONRPC, "1.0")},
			SelectOptions{CardOrigin: "https://rpc.vendor.example"}, iface("https://RPC.Vendor.Example:443/a2a", BindingJSONRPC, "1.0"), BindingJSONRPC, ""},
		{"plain http on 127.0.0.1", []Interface{iface("http://127.0.0.1:41241/a2a", BindingJSONRPC, "1.0")},
			SelectOptions{CardOrigin: "http://127.0.0.1:41241"}, iface("http://127.0.0.1:41241/a2a", BindingJSONRPC, "1.0"), BindingJSONRPC, ""},
		{"plain http on localhost", []Interface{iface("http://localhost:41241/a2a/jsonrpc", BindingJSONRPC, "1.0")},
			SelectOptions{CardOrigin: "http://localhost:41241"}, iface("http://localhost:41241/a2a/jsonrpc", BindingJSONRPC, "1.0"), BindingJSONRPC, ""},
		{"plain http on [::1]", []Interface{iface("http://[::1]:8080/a2a", BindingHTTPJSON, "1.0")},
			SelectOptions{CardOrigin: "http://[::1]:8080"}, iface("http://[::1]:8080/a2a", BindingHTTPJSON, "1.0"), BindingHTTPJSON, ""},
		{"plain http on example.com refused", []Interface{iface("http://agent.example.com/a2a", BindingJSONRPC, "1.0")},
			SelectOptions{CardOrigin: "https://agent.example.com", AllowedOrigins: []string{"https://agent.example.com"}}, Interface{}, "",
			noneQualifies + "/supportedInterfaces/0/url: plain http, which a2ad uses only on a loopback host (localhost, 127.0.0.0/8, ::1): https is required"},
		{"another origin refused", []Interface{iface("https://elsewhere.example/a2a", BindingJSONRPC, "1.0")},
			SelectOptions{CardOrigin: vendor}, Interface{}, "",
			noneQualifies + "/supportedInterfaces/0/url: its origin https://elsewhere.example is neither the card's origin https://rpc.vendor.example nor in the agent's allowed_origins"},
		{"another origin when allowed", []Interface{iface("https://elsewhere.example/a2a", BindingJSONRPC, "1.0")},
			SelectOptions{CardOrigin: vendor, AllowedOrigins: []string{"https://elsewhere.example"}}, iface("https://elsewhere.example/a2a", BindingJSONRPC, "1.0"), BindingJSONRPC, ""},
		{"another port is another origin", []Interface{iface("https://rpc.vendor.example:8443/a2a", BindingJSONRPC, "1.0")},
			SelectOptions{CardOrigin: vendor}, Interface{}, "",
			noneQualifies + "/supportedInterfaces/0/url: its origin https://rpc.vendor.example:8443 is neither the card's origin https://rpc.vendor.example nor in the agent's allowed_origins"},
		{"registered over NATS: HTTP needs allowed_origins", []Interface{jsonrpcIface}, SelectOptions{}, Interface{}, "",
			noneQualifies + "/supportedInterfaces/0/url: the card was registered over NATS and vouches for no HTTP origin: its origin https://rpc.vendor.example must be in the agent's allowed_origins"},
		{"registered over NATS, origin allowed", []Interface{jsonrpcIface}, SelectOptions{AllowedOrigins: []string{vendor}},
			jsonrpcIface, BindingJSONRPC, ""},
		{"0.3 and GRPC never", []Interface{
			iface("https://rpc.vendor.example/a2a", BindingJSONRPC, "0.3"),
			iface("https://rpc.vendor.example/grpc", "GRPC", "1.0"),
			iface("https://rpc.vendor.example/rest", BindingHTTPJSON, "0.3.0"),
		}, SelectOptions{CardOrigin: vendor}, Interface{}, "", noneQualifies +
			"/supportedInterfaces/0/protocolVersion: JSONRPC at a protocolVersion other than 1.0 (a2ad speaks A2A 1.0 only); " +
			"/supportedInterfaces/1/protocolBinding: GRPC, which a2ad does not delegate over (only JSONRPC and HTTP+JSON); " +
			"/supportedInterfaces/2/protocolVersion: HTTP+JSON at a protocolVersion other than 1.0 (a2ad speaks A2A 1.0 only)"},
		{"GRPC skipped for the next usable one", []Interface{iface("rpc.vendor.example:443", "GRPC", "1.0"), restIface},
			SelectOptions{CardOrigin: vendor}, restIface, BindingHTTPJSON, ""},
		{"user info, custom binding, a URL nobody could use", []Interface{
			iface("https://user:pw@rpc.vendor.example/a2a", BindingJSONRPC, "1.0"),
			iface("https://rpc.vendor.example/a2a", "urn:example:binding", "1.0"),
			iface("ftp://rpc.vendor.example/a2a", BindingHTTPJSON, "1.0"),
		}, SelectOptions{CardOrigin: vendor}, Interface{}, "", noneQualifies +
			"/supportedInterfaces/0/url: carries user info; " +
			"/supportedInterfaces/1/protocolBinding: not a binding a2ad speaks (urn:a2ad:binding:nats:v1, JSONRPC, HTTP+JSON); " +
			"/supportedInterfaces/2/url: not an https URL"},
		{"an origin with odd characters is not quoted", []Interface{iface("https://a$b'c.example/a2a", BindingJSONRPC, "1.0")},
			SelectOptions{CardOrigin: vendor}, Interface{}, "",
			noneQualifies + "/supportedInterfaces/0/url: its origin is neither the card's origin https://rpc.vendor.example nor in the agent's allowed_origins"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, binding, fault := SelectInterface(&Card{SupportedInterfaces: tt.ifaces}, tt.o)
			if in != tt.want || binding != tt.binding || fault != tt.fault {
				t.Errorf("SelectInterface = %+v, %q,\n%q\nwant %+v, %q,\n%q", in, binding, fault, tt.want, tt.binding, tt.fault)
			}
		})
	}
}

func TestSelectInterfaceFaultIsBounded(t *testing.T) {
	var ifaces []Interface
	for range 20 {
		ifaces = append(ifaces, iface("https://rpc.vendor.example/grpc", "GRPC", "1.0"))
	}
	_, _, fault := SelectInterface(&Card{SupportedInterfaces: ifaces}, SelectOptions{})
	if n := strings.Count(fault, "/supportedInterfaces/"); n != maxSelectReasons || !strings.HasSuffix(fault, "; and 12 more") {
		t.Errorf("fault names %d interfaces: %q; want %d and \"; and 12 more\"", n, fault, maxSelectReasons)
	}
}

func TestParseOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://RPC.vendor.example":      "https://rpc.vendor.example",
		"https://rpc.vendor.example:443":  "https://rpc.vendor.example",
		"https://rpc.vendor.example/":     "https://rpc.vendor.example",
		"https://rpc.vendor.example:8443": "https://rpc.vendor.example:8443",
		"http://127.0.0.1:80":             "http://127.0.0.1",
		"http://localhost:41241":          "http://localhost:41241",
		"http://[::1]:9000":               "http://[::1]:9000",
	} {
		if got, err := ParseOrigin(in); got != want || err != nil {
			t.Errorf("ParseOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "rpc.vendor.example", "http://rpc.vendor.example", "https://rpc.vendor.example/a2a",
		"https://u@rpc.vendor.example", "https://rpc.vendor.example?x", "nats://rpc.vendor.example", "https://rpc.vendor.example:99999", "null"} {
		if got, err := ParseOrigin(in); err == nil {
			t.Errorf("ParseOrigin(%q) = %q, want an error", in, got)
		}
	}
}

// The A2A 1.0 specification's sample card, fetched from its own origin,
// is delegated to over its first interface, JSONRPC; its GRPC one is never
// used, and HTTP+JSON only when the operator prefers it.
func TestSelectInterfaceSpecSampleCard(t *testing.T) {
	raw, err := os.ReadFile("../testdata/cards/a2a-1.0-spec-sample.json")
	if err != nil {
		t.Fatal(err)
	}
	card, _, err := Check(raw)
	if err != nil {
		t.Fatal(err)
	}
	o := SelectOptions{CardOrigin: OriginOf("https://georoute-agent.example.com/.well-known/agent-card.json")}
	in, binding, fault := SelectInterface(card, o)
	if in.URL != "https://georoute-agent.example.com/a2a/v1" || binding != BindingJSONRPC || fault != "" {
		t.Errorf("SelectInterface = %+v, %q, %q; want the JSONRPC interface", in, binding, fault)
	}
	o.Prefer = []string{BindingHTTPJSON}
	if in, binding, fault := SelectInterface(card, o); in.URL != "https://georoute-agent.example.com/a2a/json" || binding != BindingHTTPJSON || fault != "" {
		t.Errorf("SelectInterface preferring HTTP+JSON = %+v, %q, %q; want the HTTP+JSON interface", in, binding, fault)
	}
	o.Prefer = []string{"GRPC"} // NewRegistry refuses it; SelectInterface still never picks GRPC
	if in, _, fault := SelectInterface(card, o); fault == "" {
		t.Errorf("SelectInterface preferring GRPC = %+v, want none", in)
	}
}

// The @a2a-js/sdk 1.3 card issue 16 quotes, fetched from its origin and
// approved, is delegable over JSONRPC, its first interface; registered over
// NATS it is not, until the operator allows its origin.
func TestJSSDKCardDelegableOverJSONRPC(t *testing.T) {
	raw, err := os.ReadFile("../testdata/cards/a2a-js-1.3-mixed.json")
	if err != nil {
		t.Fatal(err)
	}
	const id = "movie-agent"
	r, _ := newRegistry(t, AgentConfig{ID: id, Tenants: []string{"default"}, TrustOnFirstUse: true, CardURL: "http://localhost:41241/.well-known/agent-card.json"})
	rec, _, err := r.RegisterFetched(t.Context(), id, raw, "http://localhost:41241/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	want := Interface{URL: "http://localhost:41241/a2a/jsonrpc", ProtocolBinding: BindingJSONRPC, ProtocolVersion: "1.0"}
	if !rec.Delegable || rec.Binding != BindingJSONRPC || rec.Interface == nil || *rec.Interface != want || rec.CardOrigin != "http://localhost:41241" {
		t.Fatalf("RegisterFetched = %s binding %q interface %+v origin %q; want delegable over JSONRPC", summary(rec), rec.Binding, rec.Interface, rec.CardOrigin)
	}
	got, card, err := r.ForDelegation(t.Context(), "default", id, "general_movie_chat")
	if err != nil || got.Binding != BindingJSONRPC || *got.Interface != want || card.Name != "Movie Agent" {
		t.Errorf("ForDelegation = %v binding %q", err, got.Binding)
	}
	target, err := r.HTTPTarget(t.Context(), id)
	if err != nil || target.Binding != BindingJSONRPC || target.Interface != want || target.CardOrigin != "http://localhost:41241" ||
		target.Capabilities.Streaming == nil || !*target.Capabilities.Streaming || target.Capabilities.PushNotifications == nil || *target.Capabilities.PushNotifications {
		t.Errorf("HTTPTarget = %+v, %v; want JSONRPC, streaming, no push notifications", target, err)
	}
	stored, err := r.Get(t.Context(), id)
	if err != nil || stored.CardOrigin != "http://localhost:41241" || stored.Binding != BindingJSONRPC {
		t.Errorf("Get = %+v, %v; want the origin stored", stored, err)
	}

	// The same card sent over NATS vouches for no origin.
	rec = register(t, r, id, raw)
	if rec.Delegable || rec.CardOrigin != "" || rec.Binding != "" || !strings.Contains(rec.NotDelegableReason, "/supportedInterfaces/0/url: the card was registered over NATS and vouches for no HTTP origin: its origin http://localhost:41241 must be in the agent's allowed_origins") {
		t.Errorf("Register over NATS = %s", summary(rec))
	}
	if _, err := r.HTTPTarget(t.Context(), id); !errors.As(err, new(*NotDelegableError)) {
		t.Errorf("HTTPTarget of a card registered over NATS = %v, want *NotDelegableError", err)
	}
	allowed, _ := newRegistry(t, AgentConfig{ID: id, Tenants: []string{"default"}, TrustOnFirstUse: true, AllowedOrigins: []string{"http://localhost:41241"}, Bindings: []string{BindingHTTPJSON}})
	rec = register(t, allowed, id, raw)
	if !rec.Delegable || rec.Binding != BindingHTTPJSON || rec.Interface.URL != "http://localhost:41241/a2a/rest" {
		t.Errorf("Register over NATS with allowed_origins, bindings [HTTP+JSON] = %s binding %q", summary(rec), rec.Binding)
	}
}

func TestHTTPTargetOfNATSAgent(t *testing.T) {
	r, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true})
	rec := register(t, r, agent, fixture(t))
	if !rec.Delegable || rec.Binding != BindingNATS || rec.Interface == nil || rec.Interface.ProtocolBinding != natsbind.BindingURI {
		t.Fatalf("Register = %s binding %q", summary(rec), rec.Binding)
	}
	if _, err := r.HTTPTarget(t.Context(), agent); !errors.Is(err, ErrNATSAgent) {
		t.Errorf("HTTPTarget = %v, want ErrNATSAgent", err)
	}
	if _, err := r.HTTPTarget(t.Context(), "nobody"); !errors.Is(err, ErrAgentNotFound) {
		t.Errorf("HTTPTarget(nobody) = %v, want ErrAgentNotFound", err)
	}
}

func TestNewRegistryRefusesBadHTTPConfig(t *testing.T) {
	err := CheckHTTPConfig(AgentConfig{ID: agent, Bindings: []string{"GRPC", BindingJSONRPC, BindingJSONRPC},
		AllowedOrigins: []string{"https://ok.example", "http://vendor.example", "https://vendor.example/a2a"}})
	want := []string{
		`bindings[0]: want JSONRPC or HTTP+JSON, got "GRPC"`,
		`bindings[2]: JSONRPC is listed twice`,
		`allowed_origins[1]: ` + errOrigin.Error() + `, got "http://vendor.example"`,
		`allowed_origins[2]: ` + errOrigin.Error() + `, got "https://vendor.example/a2a"`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("CheckHTTPConfig = %v\nwant %s", err, strings.Join(want, "\n"))
	}
	_, js := newRegistry(t)
	if _, err := NewRegistry(t.Context(), js, []AgentConfig{{ID: agent, Bindings: []string{"grpc"}}}, 0); err == nil ||
		err.Error() != `agentcard: agent fraud-review: bindings[0]: want JSONRPC or HTTP+JSON, got "grpc"` {
		t.Errorf("NewRegistry = %v", err)
	}
}

// selectionRules reports why in, chosen with o among ifaces, breaks
// SelectInterface's rules, or "".
func selectionRules(ifaces []Interface, o SelectOptions, in Interface, binding string) string {
	if i := slices.IndexFunc(ifaces, func(x Interface) bool { return x.ProtocolBinding == natsbind.BindingURI && x.ProtocolVersion == "1.0" }); i >= 0 {
		if binding != BindingNATS || in != ifaces[i] {
			return "a NATS interface is offered but not chosen"
		}
		return ""
	}
	if binding != in.ProtocolBinding || (binding != BindingJSONRPC && binding != BindingHTTPJSON) || in.ProtocolVersion != "1.0" {
		return "not JSONRPC or HTTP+JSON at 1.0"
	}
	if len(o.Prefer) > 0 && !slices.Contains(o.Prefer, binding) {
		return "a binding the operator did not list"
	}
	u, err := url.Parse(in.URL)
	if err != nil || u.User != nil {
		return "URL does not parse or carries user info"
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && (strings.EqualFold(u.Hostname(), "localhost") || net.ParseIP(u.Hostname()).IsLoopback())) {
		return "not https, nor http on loopback"
	}
	origin := OriginOf(in.URL)
	card, _ := ParseOrigin(o.CardOrigin)
	ok := origin != "" && origin == card
	for _, a := range o.AllowedOrigins {
		n, _ := ParseOrigin(a)
		ok = ok || (origin != "" && n == origin)
	}
	if !ok {
		return "origin neither the card's nor allowed"
	}
	return ""
}

func FuzzSelectInterface(f *testing.F) {
	f.Add("https://rpc.vendor.example/a2a", "JSONRPC", "1.0", "http://localhost:1/x", "HTTP+JSON", "1.0", "https://rpc.vendor.example", "http://localhost:1", "HTTP+JSON")
	f.Add("nats://n:4222/a2a.agent.x", natsbind.BindingURI, "1.0", "https://a.example", "JSONRPC", "1.0", "", "", "")
	f.Add("http://127.0.0.1:8/a", "JSONRPC", "0.3", "https://[::1]:9/", "GRPC", "1.0", "http://127.0.0.1:8", "https://[::1]:9", "JSONRPC")
	f.Fuzz(func(t *testing.T, url1, b1, v1, url2, b2, v2, cardOrigin, allowed, prefer string) {
		ifaces := []Interface{iface(url1, b1, v1), iface(url2, b2, v2)}
		o := SelectOptions{CardOrigin: cardOrigin, AllowedOrigins: []string{allowed}}
		if prefer != "" {
			o.Prefer = []string{prefer}
		}
		in, binding, fault := SelectInterface(&Card{SupportedInterfaces: ifaces}, o)
		if fault != "" {
			if binding != "" || in != (Interface{}) {
				t.Fatalf("a fault %q with a choice %+v %q", fault, in, binding)
			}
			if strings.ContainsAny(fault, "\n\r") {
				t.Fatalf("fault %q carries a line break", fault)
			}
			return
		}
		if why := selectionRules(ifaces, o, in, binding); why != "" {
			t.Fatalf("chose %+v (%s) with %+v: %s", in, binding, o, why)
		}
	})
}
