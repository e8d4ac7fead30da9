package httpbind

import (
	"errors"
	"io"
	"strings"
	"testing"
)

const dupEvent = `{"jsonrpc":"2.0","id":1,"result":{"artifactUpdate":{"taskId":"t","artifact":{"artifactId":"ra","parts":[{"data":{"risk_level":"high","risk_level":"low"}}]}}}}`

// readEvents passes stream through checkedEvents.
func readEvents(stream string) (string, error) {
	b, err := io.ReadAll(&checkedEvents{agentID: "a", rc: io.NopCloser(strings.NewReader(stream))})
	return string(b), err
}

// Whatever the framing, an event whose data holds a duplicate member ends
// the stream: the lines and events are those a2a-go's parser reads (a line
// ends at "\n" with one "\r" before it dropped; a lone "\r" is inside the
// line), so no framing makes the check see other events than a2a-go.
func TestCheckedEventsFindDuplicatesWhateverTheFraming(t *testing.T) {
	ok := `{"jsonrpc":"2.0","id":1,"result":{"statusUpdate":{"taskId":"t","status":{"state":"TASK_STATE_WORKING"}}}}`
	for name, stream := range map[string]string{
		"LF":                         "data: " + ok + "\n\ndata: " + dupEvent + "\n\n",
		"CRLF":                       "data: " + ok + "\r\n\r\ndata: " + dupEvent + "\r\n\r\n",
		`"\n\r\n" ends an event`:     "data: " + ok + "\n\r\ndata: " + dupEvent + "\n\r\n",
		`"\r\r" inside a data line`:  "data: " + strings.Replace(dupEvent, `"low"`, "\r\r"+`"low"`, 1) + "\n\n",
		"data split over two lines":  "data: " + dupEvent[:strings.Index(dupEvent, `"result"`)] + "\ndata: " + dupEvent[strings.Index(dupEvent, `"result"`):] + "\n\n",
		"last event without a blank": "data: " + ok + "\n\ndata: " + dupEvent,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readEvents(stream)
			var de *DuplicateError
			if !errors.As(err, &de) || de.What != "stream event" {
				t.Fatalf("err %v, want a *DuplicateError of a stream event", err)
			}
		})
	}
}

// An honest stream goes through byte for byte: comments, ids, event and
// retry fields, data over two lines, CRLF.
func TestCheckedEventsPassHonestStreams(t *testing.T) {
	stream := ": keep-alive\r\nid: 1\r\nevent: message\r\nretry: 1000\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata: {\"b\":2}\n\n: trailing comment"
	got, err := readEvents(stream)
	if !errors.Is(err, nil) || got != stream {
		t.Fatalf("got %q, %v; want the stream unchanged", got, err)
	}
}

// A body must be one JSON value: a2a-go reads the first and ignores the
// rest, so a duplicate hidden behind a valid prefix, or trailing text, is
// refused.
func TestCheckedBodyIsOneJSONValue(t *testing.T) {
	for name, c := range map[string]struct {
		body     string
		trailing bool
		ok       bool
	}{
		"duplicate":           {body: dupEvent},
		"duplicate and text":  {body: dupEvent + " x", trailing: true},
		"one value and space": {body: `{"a":1}` + " \n", ok: true},
		"two values":          {body: `{"a":1}{"a":2}`, trailing: true},
		"not JSON":            {body: `<html>`, ok: true}, // a2a-go's to refuse
	} {
		t.Run(name, func(t *testing.T) {
			rc, err := checkedBody("a", io.NopCloser(strings.NewReader(c.body)))
			var de *DuplicateError
			switch {
			case c.ok && err == nil:
				b, _ := io.ReadAll(rc)
				if string(b) != c.body {
					t.Fatalf("body %q, want %q", b, c.body)
				}
			case !c.ok && errors.As(err, &de) && de.Trailing == c.trailing:
			default:
				t.Fatalf("err %v (%+v), want ok=%v trailing=%v", err, de, c.ok, c.trailing)
			}
		})
	}
}

// FuzzCheckedEvents: any stream either goes through unchanged or ends with
// a *DuplicateError at an event whose data does hold one.
func FuzzCheckedEvents(f *testing.F) {
	f.Add("data: {\"a\":1}\n\n")
	f.Add("data: " + dupEvent + "\n\r\n")
	f.Add(": c\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n")
	f.Fuzz(func(t *testing.T, stream string) {
		got, err := readEvents(stream)
		var de *DuplicateError
		switch {
		case err == nil:
			if got != stream {
				t.Fatalf("stream changed: %q -> %q", stream, got)
			}
		case errors.As(err, &de):
			if !strings.HasPrefix(stream, got) {
				t.Fatalf("released bytes %q are not a prefix of %q", got, stream)
			}
		default:
			t.Fatalf("err %v", err)
		}
	})
}
