//lint:file-ignore SA1019 the conformance suite's SEP-2322 scenarios ask for sampling and roots input requests, which SEP-2577 deprecates but 2026-07-28 still has

package mcpedge

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Conformance tools. The official MCP conformance suite
// (@modelcontextprotocol/conformance) probes a server's input requests
// (SEP-2322) only through test tools of its own, test_input_required_result_*,
// which a2ad's real tools cannot stand in for: their input requests come
// from an agent's question, which the suite cannot make. With
// Options.ConformanceTools (flag `a2ad serve --conformance-tools`, which
// .ci/conformance passes), a2ad adds those tools, as each scenario
// describes them, so that the suite exercises what they share with a2ad's
// own tools: the go-sdk's input-request plumbing in both eras, and a2ad's
// request states (sealed and verified as a question's are, bound to the
// caller, a tampered one refused with [requestStateError]) and its answer
// to a retry without the responses asked for (asked again). They never
// reach an agent or a task, need scope a2a:read, and are never on by
// default: a production a2ad lists only its five tools. The same goes for
// the suite's one test prompt, test_input_required_result_prompt (an
// input request on prompts/get, scenario
// input-required-result-non-tool-request): with it a2ad declares the
// prompts capability and serves prompts/list and prompts/get, which a
// production a2ad refuses (capabilities.go).

// conformanceTools are the suite's test tools, by name.
var conformanceTools = []string{
	"test_input_required_result_elicitation",
	"test_input_required_result_sampling",
	"test_input_required_result_list_roots",
	"test_input_required_result_request_state",
	"test_input_required_result_multiple_inputs",
	"test_input_required_result_multi_round",
	"test_input_required_result_tampered_state",
	"test_input_required_result_capabilities",
}

func init() {
	for _, name := range conformanceTools {
		ToolScopes[name] = ScopeRead // listed and called like agents_list, when added at all
	}
}

// conformanceInput: the test tools take no arguments.
type conformanceInput struct{}

// addConformanceTools adds the suite's test tools to s.
func (e *Edge) addConformanceTools(s *mcp.Server) {
	if len(e.stateKey) == 0 {
		e.stateKey = make([]byte, 32)
		_, _ = rand.Read(e.stateKey) // never fails (crypto/rand, Go 1.24+)
	}
	for _, name := range conformanceTools {
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "MCP conformance suite fixture (SEP-2322 input requests): " + strings.TrimPrefix(name, "test_input_required_result_") + "; a2ad serve --conformance-tools only",
			InputSchema: encodedInputSchema[conformanceInput]()},
			func(ctx context.Context, req *mcp.CallToolRequest, _ conformanceInput) (*mcp.CallToolResult, any, error) {
				return e.conformanceCall(req, name)
			})
	}
	s.AddPrompt(&mcp.Prompt{Name: conformancePrompt, Description: "MCP conformance suite fixture (SEP-2322 input requests on prompts/get): asks for its context first; a2ad serve --conformance-tools only"},
		e.conformanceGetPrompt)
}

// conformancePrompt is the suite's test prompt.
const conformancePrompt = "test_input_required_result_prompt"

// contextRequest is the input request of conformancePrompt.
var contextRequest = elicitString("What context should the prompt use?", "context")

// conformanceGetPrompt answers prompts/get of conformancePrompt: without
// an accepted user_context response under a request state a2ad issued for
// it, an input request for one (with a fresh state); with one, the prompt,
// one user message carrying that context.
func (e *Edge) conformanceGetPrompt(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	_, valid, err := e.openConformanceState(req.Extra, req.Params.RequestState, conformancePrompt)
	if err != nil {
		return nil, err
	}
	if c, ok := accepted(req.Params.InputResponses["user_context"], "context"); valid && ok {
		return &mcp.GetPromptResult{Description: "A prompt built from the context the user gave",
			Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Use this context: " + c}}}}, nil
	}
	return &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{"user_context": contextRequest},
		RequestState: e.conformanceState(req.Extra, conformancePrompt, 1, "")}, nil
}

func elicitString(message, property string) *mcp.ElicitParams {
	return &mcp.ElicitParams{Mode: "form", Message: message, RequestedSchema: json.RawMessage(fmt.Sprintf(
		`{"type":"object","properties":{%q:{"type":"string"}},"required":[%q]}`, property, property))}
}

var (
	confirmRequest  = &mcp.ElicitParams{Mode: "form", Message: "Please confirm", RequestedSchema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)}
	capitalQuestion = &mcp.CreateMessageParams{MaxTokens: 100, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "What is the capital of France?"}}}}
	greetingRequest = &mcp.CreateMessageParams{MaxTokens: 50, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Generate a greeting"}}}}
)

func textResult(format string, args ...any) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}, nil, nil
}

// accepted is the string content[key] of an accepted elicitation response.
func accepted(r mcp.InputResponse, key string) (string, bool) {
	er, ok := r.(*mcp.ElicitResult)
	if !ok || er.Action != "accept" {
		return "", false
	}
	switch v := er.Content[key].(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

// conformanceState seals round of tool (or prompt) for the caller, with
// data carried to the next round.
func (e *Edge) conformanceState(extra *mcp.RequestExtra, tool string, round int, data string) string {
	p := e.principalOf(extra)
	return sealState(e.stateKey, stateClaims{Kind: "conformance:" + tool, Task: strconv.Itoa(round), Tenant: p.Tenant, Subject: p.Subject,
		Exp: time.Now().Add(RequestStateTTL).Unix(), Data: data})
}

// openConformanceState verifies a retry's request state: ok false without
// one; a JSON-RPC error for one a2ad did not issue to this caller for tool
// (or prompt).
func (e *Edge) openConformanceState(extra *mcp.RequestExtra, state, tool string) (c stateClaims, ok bool, err error) {
	if state == "" {
		return c, false, nil
	}
	c, err = openState(e.stateKey, e.principalOf(extra), state, time.Now())
	if err != nil || c.Kind != "conformance:"+tool {
		return c, false, requestStateError()
	}
	return c, true, nil
}

func (e *Edge) conformanceCall(req *mcp.CallToolRequest, name string) (*mcp.CallToolResult, any, error) {
	in := req.Params.InputResponses
	ask := func(requests mcp.InputRequestMap, state string) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{InputRequests: requests, RequestState: state}, nil, nil
	}
	switch name {
	case "test_input_required_result_elicitation":
		if n, ok := accepted(in["user_name"], "name"); ok {
			return textResult("Hello, %s!", n)
		}
		return ask(mcp.InputRequestMap{"user_name": elicitString("What is your name?", "name")}, "")
	case "test_input_required_result_sampling":
		if r, ok := in["capital_question"].(*mcp.CreateMessageWithToolsResult); ok {
			return textResult("The model answered %d content blocks.", len(r.Content))
		}
		return ask(mcp.InputRequestMap{"capital_question": capitalQuestion}, "")
	case "test_input_required_result_list_roots":
		if r, ok := in["client_roots"].(*mcp.ListRootsResult); ok {
			uris := make([]string, 0, len(r.Roots))
			for _, root := range r.Roots {
				uris = append(uris, root.URI)
			}
			return textResult("Roots: %s", strings.Join(uris, ", "))
		}
		return ask(mcp.InputRequestMap{"client_roots": &mcp.ListRootsParams{}}, "")
	case "test_input_required_result_request_state", "test_input_required_result_tampered_state":
		_, valid, err := e.openConformanceState(req.Extra, req.Params.RequestState, name)
		if err != nil {
			return nil, nil, err
		}
		if ok, answered := accepted(in["confirm"], "ok"); valid && answered {
			return textResult("state-ok: confirmed %s", ok)
		}
		return ask(mcp.InputRequestMap{"confirm": confirmRequest}, e.conformanceState(req.Extra, name, 1, ""))
	case "test_input_required_result_multiple_inputs":
		_, valid, err := e.openConformanceState(req.Extra, req.Params.RequestState, name)
		if err != nil {
			return nil, nil, err
		}
		want := mcp.InputRequestMap{"user_name": elicitString("What is your name?", "name"), "greeting": greetingRequest, "client_roots": &mcp.ListRootsParams{}}
		_, named := accepted(in["user_name"], "name")
		_, greeted := in["greeting"].(*mcp.CreateMessageWithToolsResult)
		_, rooted := in["client_roots"].(*mcp.ListRootsResult)
		if valid && named && greeted && rooted {
			return textResult("All three input responses received.")
		}
		if valid { // ask again for what is missing only
			for k, got := range map[string]bool{"user_name": named, "greeting": greeted, "client_roots": rooted} {
				if got {
					delete(want, k)
				}
			}
		}
		return ask(want, e.conformanceState(req.Extra, name, 1, ""))
	case "test_input_required_result_multi_round":
		c, valid, err := e.openConformanceState(req.Extra, req.Params.RequestState, name)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case valid && c.Task == "1":
			if n, ok := accepted(in["step1"], "name"); ok {
				return ask(mcp.InputRequestMap{"step2": elicitString("Step 2: What is your favorite color?", "color")}, e.conformanceState(req.Extra, name, 2, n))
			}
			return ask(mcp.InputRequestMap{"step1": elicitString("Step 1: What is your name?", "name")}, req.Params.RequestState)
		case valid && c.Task == "2":
			if color, ok := accepted(in["step2"], "color"); ok {
				return textResult("%s's favorite color is %s.", c.Data, color)
			}
			return ask(mcp.InputRequestMap{"step2": elicitString("Step 2: What is your favorite color?", "color")}, req.Params.RequestState)
		}
		return ask(mcp.InputRequestMap{"step1": elicitString("Step 1: What is your name?", "name")}, e.conformanceState(req.Extra, name, 1, ""))
	case "test_input_required_result_capabilities":
		// Only what the caller declared it can answer (SEP-2322).
		caps := req.ClientCapabilities()
		want := mcp.InputRequestMap{}
		if caps != nil && caps.Elicitation != nil {
			want["user_name"] = elicitString("What is your name?", "name")
		}
		if caps != nil && caps.Sampling != nil {
			want["capital_question"] = capitalQuestion
		}
		if caps != nil && caps.RootsV2 != nil {
			want["client_roots"] = &mcp.ListRootsParams{}
		}
		answered := len(want) > 0
		for k := range want {
			answered = answered && in[k] != nil
		}
		if len(want) == 0 || answered {
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range want {
					if !yield(k) {
						return
					}
				}
			})
			return textResult("Input requests the client could answer: %s.", strings.Join(keys, ", "))
		}
		return ask(want, "")
	}
	return nil, nil, fmt.Errorf("unknown conformance tool %s", name)
}
