package mcpedge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolInputs are the argument types of a2ad's tools, read by
// [checkArguments].
var toolInputs = map[string]reflect.Type{
	"agents_list":  reflect.TypeFor[AgentsListInput](),
	"delegate":     reflect.TypeFor[DelegateInput](),
	"task_get":     reflect.TypeFor[TaskGetInput](),
	"task_respond": reflect.TypeFor[TaskRespondInput](),
	"task_cancel":  reflect.TypeFor[TaskCancelInput](),
}

// checkArguments returns every fault of a tool call's arguments against
// the tool's input type, each as "<JSON pointer>: <what is wanted>" (RFC
// 6901 pointers into the arguments), in a2ad's words; nil when there is
// none. The go-sdk's own check answers in its libraries' words (Go type
// names, "validating root"), which no host should read.
func checkArguments(t reflect.Type, raw json.RawMessage) []string {
	return checkArgumentsWithin(t, raw, schemaLimits{})
}

// checkArgumentsWithin is checkArguments with the bounds of the tool
// schemas ([portable]): wait_seconds from 0 to 50, deadline_seconds from 0
// to lim.MaxDeadlineSeconds (when set).
func checkArgumentsWithin(t reflect.Type, raw json.RawMessage, lim schemaLimits) []string {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	var faults []string
	b := bounds{"wait_seconds": {0, maxWaitSeconds}, "deadline_seconds": {0, math.MaxInt64}}
	if lim.MaxDeadlineSeconds > 0 {
		b["deadline_seconds"] = [2]int64{0, int64(lim.MaxDeadlineSeconds)}
	}
	checkValue(t, raw, "", b, &faults)
	return faults
}

// bounds are the inclusive ranges of integer arguments, by member name.
type bounds map[string][2]int64

func checkValue(t reflect.Type, raw json.RawMessage, ptr string, b bounds, faults *[]string) {
	at := ptr
	if at == "" {
		at = "arguments"
	}
	raw = bytes.TrimSpace(raw)
	isNull := bytes.Equal(raw, []byte("null"))
	if t.Kind() == reflect.Pointer {
		if isNull {
			return
		}
		t = t.Elem()
	}
	add := func(want string) { *faults = append(*faults, at+": want "+want) }
	switch t.Kind() {
	case reflect.String:
		if len(raw) == 0 || raw[0] != '"' {
			add("a string")
		}
	case reflect.Bool:
		if !bytes.Equal(raw, []byte("true")) && !bytes.Equal(raw, []byte("false")) {
			add("true or false")
		}
	case reflect.Int, reflect.Int64:
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			add("an integer")
			return
		}
		v, err := n.Int64()
		if err != nil {
			add(fmt.Sprintf("an integer from %d to %d, in digits (no fraction, no exponent)", math.MinInt64, math.MaxInt64))
			return
		}
		name := ptr[strings.LastIndex(ptr, "/")+1:]
		if r, ok := b[name]; ok && (v < r[0] || v > r[1]) {
			add(fmt.Sprintf("an integer from %d to %d", r[0], r[1]))
		}
	case reflect.Slice:
		var items []json.RawMessage
		if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
			if !isNull {
				add("an array")
			}
			return
		}
		for i, it := range items {
			checkValue(t.Elem(), it, fmt.Sprintf("%s/%d", ptr, i), b, faults)
		}
	case reflect.Map:
		if len(raw) == 0 || raw[0] != '{' {
			add("a JSON object")
		}
	case reflect.Struct:
		var m map[string]json.RawMessage
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
			add("a JSON object")
			return
		}
		var names []string
		fields := map[string]reflect.StructField{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			names = append(names, name)
			fields[name] = f
			if _, ok := m[name]; !ok && !strings.Contains(opts, "omitempty") {
				*faults = append(*faults, ptr+"/"+escapePointer(name)+": required")
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				known := "no arguments"
				if len(names) > 0 {
					known = strings.Join(names, ", ")
				}
				*faults = append(*faults, ptr+"/"+escapePointer(k)+": unknown argument (this takes "+known+")")
				continue
			}
			checkValue(f.Type, m[k], ptr+"/"+escapePointer(k), b, faults)
		}
	}
}

// escapePointer escapes a member name as an RFC 6901 reference token.
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// argumentsError is the result of a call whose arguments have faults: a
// tool execution error (isError), code invalid_argument, which the model
// can read and correct (MCP 2025-11-25 server/tools, "Error Handling":
// input validation errors are tool execution errors, not protocol
// errors).
func argumentsError(tool string, faults []string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
		Text: fmt.Sprintf("invalid_argument: tool %s: %s (its input schema is in tools/list)", tool, strings.Join(faults, "; "))}}}
}

// libraryPhrases mark a tool error result written by the go-sdk or
// encoding/json rather than by a2ad.
var libraryPhrases = []string{"validating \"arguments\"", "json: cannot", "Go struct field", "mcpedge."}

// checkToolArguments is the middleware that answers a tools/call of one
// of a2ad's tools whose arguments have faults ([checkArguments]) with
// [argumentsError] before the go-sdk reads them, and replaces any error
// result the go-sdk still writes in its own words with a2ad's.
//
// Top-level pointer and slice members sent as null mean absent: they are
// removed before the go-sdk validates the arguments against the portable
// input schema, whose types have no null ([portable]).
func checkToolArguments(lim schemaLimits) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return checkToolArgumentsWithin(next, lim)
	}
}

func checkToolArgumentsWithin(next mcp.MethodHandler, lim schemaLimits) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		cr, ok := req.(*mcp.CallToolRequest)
		if !ok || cr.Params == nil {
			return next(ctx, method, req)
		}
		t, ours := toolInputs[cr.Params.Name]
		if ours {
			if faults := checkArgumentsWithin(t, cr.Params.Arguments, lim); len(faults) > 0 {
				return argumentsError(cr.Params.Name, faults), nil
			}
			cr.Params.Arguments = dropNullArguments(cr.Params.Arguments, nullableArguments(t))
		}
		res, err := next(ctx, method, req)
		if tr, ok := res.(*mcp.CallToolResult); ok && err == nil && tr.IsError && ours && len(tr.Content) == 1 {
			if tc, ok := tr.Content[0].(*mcp.TextContent); ok {
				for _, ph := range libraryPhrases {
					if strings.Contains(tc.Text, ph) {
						return argumentsError(cr.Params.Name, []string{"arguments: they do not match the tool's input schema"}), nil
					}
				}
			}
		}
		return res, err
	}
}
