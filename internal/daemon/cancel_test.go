package daemon_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// After a host's notifications/cancelled for a tools/call on a
// Streamable HTTP session (2025-11-25), no response for that call's id is
// sent: its stream carries the progress sent before, then ends.
func TestNoResponseAfterCancelledOverHTTP(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-98": "silent"}) // the agent never answers: the task stays working
	token := p.sign(t, claims("host", "default", "a2a:read a2a:delegate"))
	url := p.s.d.HTTPURL + "/mcp"
	session := ""
	post := func(body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// events reads the data of each server-sent event of resp until it ends.
	events := func(resp *http.Response, each func(map[string]any) bool) {
		t.Helper()
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			if !each(m) {
				return
			}
		}
	}
	resp := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session = resp.Header.Get("Mcp-Session-Id")
	events(resp, func(map[string]any) bool { return false })
	if session == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	args, _ := json.Marshal(delegateArgs(evidence("C-98", 1999)))
	var taskID string
	events(post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delegate","arguments":`+strings.Replace(string(args), `"wait_seconds":10`, `"wait_seconds":0`, 1)+`}}`), func(m map[string]any) bool {
		res, _ := m["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		taskID, _ = sc["task_id"].(string)
		return false
	})
	if taskID == "" {
		t.Fatal("delegate returned no task")
	}
	// task_get waits (up to 30 s) on the working task; its first progress
	// notification says the wait has begun, and then the host cancels.
	call := post(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"task_get","arguments":{"task_id":"` + taskID + `","wait_seconds":30},"_meta":{"progressToken":"p3"}}}`)
	start := time.Now()
	var after []map[string]any
	cancelled := false
	events(call, func(m map[string]any) bool {
		if !cancelled {
			if m["method"] != "notifications/progress" {
				t.Fatalf("first event %v, want progress", m)
			}
			post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"user pressed stop"}}`).Body.Close()
			cancelled = true
			return true
		}
		after = append(after, m)
		return true
	})
	if !cancelled {
		t.Fatal("the call's stream ended before its first progress notification")
	}
	for _, m := range after {
		if m["id"] != nil {
			t.Errorf("after the cancellation the stream carried %v, want no response for id 3", m)
		}
	}
	if time.Since(start) >= 30*time.Second {
		t.Errorf("the stream ended only when the wait did: the cancellation did not end the call")
	}
	// The session goes on: a later call is answered.
	ok := false
	events(post(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"agents_list","arguments":{}}}`), func(m map[string]any) bool {
		ok = m["id"] == float64(4) && m["result"] != nil
		return false
	})
	if !ok {
		t.Error("agents_list after the cancellation was not answered")
	}
}
