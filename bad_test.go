package a2ad_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/corpus"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/task"
)

// badCase is one file of testdata/bad/cases: a hostile or careless input
// and the outcome a2ad must reach (see testdata/bad/README.md).
type badCase struct {
	Description string `json:"description"`
	Kind        string `json:"kind"` // brief | events | artifact

	// brief: a delegate's brief part, built with default limits against
	// the named output schema.
	Request *brief.Request `json:"request"`
	// events: A2A stream items applied in order to a submitted task whose
	// output schema is Schema (default risk_assessment).
	Events []json.RawMessage `json:"events"`
	// artifact: one A2A artifact checked against Schema.
	Artifact json.RawMessage `json:"artifact"`
	Schema   string          `json:"schema"`
	// Policy is the agent's artifact policy (events, artifact); default
	// the strict one.
	Policy artifact.Policy `json:"policy"`

	Expect struct {
		// brief
		Error string `json:"error"` // exact error text; "" means the brief is built
		// events
		State    string             `json:"state"`
		Reason   string             `json:"reason"`
		Verdicts []artifact.Verdict `json:"verdicts"`
		// Artifacts are the ids of the artifacts that reached the host.
		Artifacts []string `json:"artifacts"`
		// Refusals are the reasons of the refused events in the task's
		// history, in order (each names the JSON pointer at fault); nil
		// does not check them.
		Refusals []string `json:"refusals"`
		// artifact
		Verdict *artifact.Verdict `json:"verdict"`
	} `json:"expect"`
}

// secrets replace placeholders in the corpus, so that the repository does
// not itself hold strings that secret scanners flag.
var secrets = map[string]string{
	"{{JWT}}":          "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + "." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0" + "." + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
	"{{CARD}}":         "4111 1111" + " 1111 1111",
	"{{AWS_KEY_ID}}":   "AKIA" + "IOSFODNN7EXAMPLE",
	"{{GITHUB_TOKEN}}": "gh" + "p_" + strings.Repeat("a1B2", 9),
	"{{PEM_KEY}}":      "-----BEGIN " + "PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----",
}

// expand replaces placeholders and generators:
//
//	{"$nest": N, "leaf": V}     N arrays nested around V
//	{"$string": S, "count": N}  S repeated N times
//	{"$array": V, "count": N}   an array of N copies of V
func expand(v any) any {
	switch t := v.(type) {
	case string:
		for k, s := range secrets {
			t = strings.ReplaceAll(t, k, s)
		}
		return t
	case []any:
		for i := range t {
			t[i] = expand(t[i])
		}
		return t
	case map[string]any:
		count, _ := t["count"].(float64)
		if n, ok := t["$nest"].(float64); ok {
			out := expand(t["leaf"])
			for range int(n) {
				out = []any{out}
			}
			return out
		}
		if s, ok := t["$string"].(string); ok {
			return strings.Repeat(s, int(count))
		}
		if item, ok := t["$array"]; ok {
			out := make([]any, int(count))
			for i := range out {
				out[i] = expand(item)
			}
			return out
		}
		out := make(map[string]any, len(t))
		for k, c := range t {
			out[expand(k).(string)] = expand(c) // member names may hold placeholders too
		}
		return out
	}
	return v
}

func loadBadCase(t *testing.T, path string) badCase {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) {
		t.Fatalf("%s: not valid JSON", path)
	}
	// Placeholders and generators are expanded through a decoded copy;
	// a case without them is read as written, byte for byte (duplicate
	// members included).
	b := raw
	if bytes.Contains(raw, []byte("{{")) || bytes.Contains(raw, []byte(`"$`)) {
		var plain any
		_ = json.Unmarshal(raw, &plain)
		var err error
		if b, err = json.Marshal(expand(plain)); err != nil {
			t.Fatal(err)
		}
	}
	var c badCase
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if c.Description == "" {
		t.Fatalf("%s: no description", path)
	}
	if c.Schema == "" {
		c.Schema = "risk_assessment"
	}
	return c
}

// TestBadCorpus runs every case of testdata/bad/cases and checks the exact
// outcome; no case may echo a secret or agent-supplied value it was fed.
func TestBadCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	reg, err := artifact.LoadFS(a2ad.HostSchemas(), ".")
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := artifact.NewCatalog(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	tracker := newCorpusTracker(t, schemas)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			c := loadBadCase(t, f)
			if os.Getenv("A2AD_BAD_RECORD") != "" {
				defer record(t, f, &c)
			}
			switch c.Kind {
			case "brief":
				runBriefCase(t, &c, schemas)
			case "events":
				runEventsCase(t, &c, tracker, name)
			case "artifact":
				runArtifactCase(t, &c, schemas)
			default:
				t.Fatalf("unknown kind %q", c.Kind)
			}
		})
	}
}

func runBriefCase(t *testing.T, c *badCase, schemas *artifact.Catalog) {
	if c.Request == nil {
		t.Fatal("brief case without request")
	}
	s, err := schemas.Get(c.Request.OutputSchema)
	if err != nil {
		t.Fatal(err)
	}
	_, err = brief.Build(*c.Request, brief.OutputSchema{Name: s.Name, Digest: s.Digest, Document: s.Document}, brief.Limits{})
	got := ""
	if err != nil {
		got = err.Error()
	}
	if record := os.Getenv("A2AD_BAD_RECORD") != ""; record {
		c.Expect.Error = got
	}
	if got != c.Expect.Error {
		t.Errorf("error %q, want %q", got, c.Expect.Error)
	}
	for _, secret := range secrets {
		if strings.Contains(got, secret[:12]) {
			t.Errorf("the error quotes a secret: %q", got)
		}
	}
}

func newCorpusTracker(t *testing.T, schemas *artifact.Catalog) *task.Tracker {
	_, _, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store, err := task.NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &task.Tracker{Store: store, Schemas: schemas, Policies: map[string]artifact.Policy{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func runEventsCase(t *testing.T, c *badCase, tr *task.Tracker, name string) {
	ctx := context.Background()
	id := "tsk-" + strings.ReplaceAll(name, "_", "-")
	s, err := tr.Schemas.Get(c.Schema)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := tr.Store.Create(ctx, &task.Record{ID: id, Tenant: "default", AgentID: "fraud-review", State: task.Submitted,
		OutputSchema: s.Name, SchemaDigest: s.Digest, CreatedAt: now, UpdatedAt: now, Deadline: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	tr.Policies["fraud-review"] = c.Policy
	subject := "a2a.events.fraud-review." + id
	for i, ev := range c.Events {
		_ = tr.Apply(ctx, subject, fmt.Sprintf("%s.%d", id, i+1), ev) // refusals are part of the outcome
	}
	r, _, err := tr.Store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("A2AD_BAD_RECORD") != "" {
		c.Expect.State, c.Expect.Reason, c.Expect.Verdicts = string(r.State), r.Reason, r.Verdicts
		if c.Expect.Refusals != nil {
			c.Expect.Refusals = refusals(r)
		}
		c.Expect.Artifacts = nil
		for _, a := range r.Artifacts {
			c.Expect.Artifacts = append(c.Expect.Artifacts, a.ArtifactID)
		}
	}
	var ids []string
	for _, a := range r.Artifacts {
		ids = append(ids, a.ArtifactID)
	}
	if !reflect.DeepEqual(ids, c.Expect.Artifacts) {
		t.Errorf("artifacts %q reached the host, want %q", ids, c.Expect.Artifacts)
	}
	if string(r.State) != c.Expect.State || r.Reason != c.Expect.Reason {
		t.Errorf("state %s reason %q, want %s %q", r.State, r.Reason, c.Expect.State, c.Expect.Reason)
	}
	if c.Expect.Verdicts != nil && !reflect.DeepEqual(r.Verdicts, c.Expect.Verdicts) {
		t.Errorf("verdicts %+v, want %+v", r.Verdicts, c.Expect.Verdicts)
	}
	if got := refusals(r); c.Expect.Refusals != nil && !reflect.DeepEqual(got, c.Expect.Refusals) {
		t.Errorf("refusals %q, want %q", got, c.Expect.Refusals)
	}
	// Validated artifacts are meant for the host; nothing else may carry
	// agent text.
	shown := r.Redacted()
	shown.Artifacts = nil
	checkNoEcho(t, shown, c.Events)
}

// refusals are the reasons of the refused transitions in r's history.
func refusals(r *task.Record) []string {
	out := []string{}
	for _, h := range r.History {
		if h.Refused {
			out = append(out, h.Reason)
		}
	}
	return out
}

func runArtifactCase(t *testing.T, c *badCase, schemas *artifact.Catalog) {
	s, err := schemas.Get(c.Schema)
	if err != nil {
		t.Fatal(err)
	}
	v := artifact.CheckPolicy(s, decodeArtifact(t, c.Artifact), c.Policy)
	if os.Getenv("A2AD_BAD_RECORD") != "" {
		c.Expect.Verdict = &v
	}
	if c.Expect.Verdict == nil {
		t.Fatal("artifact case without expect.verdict")
	}
	if !reflect.DeepEqual(v, *c.Expect.Verdict) {
		t.Errorf("verdict %+v, want %+v", v, *c.Expect.Verdict)
	}
	checkNoEcho(t, v, []json.RawMessage{c.Artifact})
}

// record rewrites the case file's expect member with the outcome just
// observed (A2AD_BAD_RECORD=1): for adding cases; review every change.
func record(t *testing.T, path string, c *badCase) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	exp, _ := json.Marshal(c.Expect)
	var e map[string]any
	_ = json.Unmarshal(exp, &e)
	for k, v := range e {
		if v == nil || v == "" && (k != "error" || c.Kind != "brief") {
			delete(e, k)
		}
	}
	// Splice the new value in place of the old, leaving the rest of the
	// file as written.
	out, err := corpus.SpliceExpect(raw, e)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func decodeArtifact(t *testing.T, raw json.RawMessage) a2a.Artifact {
	t.Helper()
	var a a2a.Artifact
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("artifact: %v", err)
	}
	return a
}

// checkNoEcho fails if out, marshalled, contains any JSON string value or
// key of the inputs longer than 12 bytes (shorter ones, such as declared
// property names and keywords, legitimately appear in verdicts). The member
// names of A2A 1.0 are a2ad's words too: refusals name them in pointers
// ("/artifactUpdate/artifact").
func checkNoEcho(t *testing.T, out any, inputs []json.RawMessage) {
	t.Helper()
	b, _ := json.Marshal(out)
	for _, in := range inputs {
		var doc any
		if json.Unmarshal(in, &doc) != nil {
			continue
		}
		for _, s := range stringsOf(doc) {
			if len(s) > 12 && !a2aMembers[s] && bytes.Contains(b, []byte(s)) {
				t.Errorf("output quotes input text %.40q", s)
			}
		}
	}
}

// a2aMembers are the member names of the A2A 1.0 wire types.
var a2aMembers = func() map[string]bool {
	names := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || names[t.String()] {
			return
		}
		names[t.String()] = true
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			names[name] = true
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[a2a.StreamResponse]())
	return names
}()

func stringsOf(v any) []string {
	var out []string
	switch t := v.(type) {
	case string:
		out = append(out, t)
	case []any:
		for _, c := range t {
			out = append(out, stringsOf(c)...)
		}
	case map[string]any:
		for k, c := range t {
			out = append(out, k)
			out = append(out, stringsOf(c)...)
		}
	}
	return out
}
