package artifact

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/fstest"
)

type memArchive struct {
	mu   sync.Mutex
	docs map[string][]byte
}

func (m *memArchive) Put(d string, doc []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.docs == nil {
		m.docs = map[string][]byte{}
	}
	m.docs[d] = slices.Clone(doc)
	return nil
}

func (m *memArchive) Get(d string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.docs[d]; ok {
		return b, nil
	}
	return nil, ErrSchemaNotFound
}

func registry(t *testing.T, files map[string]string) *Registry {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, doc := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(doc)}
	}
	r, err := LoadFS(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const (
	scoreV1 = `{"type":"object","required":["score"],"properties":{"score":{"type":"number"}}}`
	// v2 also requires a reason.
	scoreV2 = `{"type": "object", "required": ["score", "reason"], "properties": {"score": {"type": "number"}, "reason": {"type": "string"}}}`
)

// A reload puts new versions in force for new tasks; a task keeps the
// version it was delegated with, also in a new process that reads it back
// from the archive.
func TestCatalogKeepsTheVersionATaskWasDelegatedWith(t *testing.T) {
	archive := &memArchive{}
	c, err := NewCatalog(registry(t, map[string]string{"score.json": scoreV1, "old.json": `{}`}), archive)
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := c.Get("score")
	ch, err := c.Reload(registry(t, map[string]string{"score.json": scoreV2, "new.json": `{}`}))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Changes{Added: []string{"new"}, Changed: []string{"score"}, Removed: []string{"old"}}); !slices.Equal(ch.Added, want.Added) ||
		!slices.Equal(ch.Changed, want.Changed) || !slices.Equal(ch.Removed, want.Removed) || len(ch.Unchanged) != 0 {
		t.Errorf("changes %+v, want %+v", ch, want)
	}
	v2, _ := c.Get("score")
	if v1.Digest == v2.Digest {
		t.Fatal("v1 and v2 have one digest")
	}
	doc := json.RawMessage(`{"score":0.5}`) // valid under v1 only
	for name, tc := range map[string]struct {
		c        *Catalog
		digest   string
		wantViol int
	}{
		"the task's version (v1)":                       {c, v1.Digest, 0},
		"the version in force (v2)":                     {c, v2.Digest, 1},
		"no digest recorded: in force":                  {c, "", 1},
		"v1 in a new process, from the archive":         {newCatalog(t, scoreV2, archive), v1.Digest, 0},
		"v2 in a new process, loaded with the registry": {newCatalog(t, scoreV2, archive), v2.Digest, 1},
	} {
		s, err := tc.c.ForTask("score", tc.digest)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := s.Validate(doc); len(got) != tc.wantViol {
			t.Errorf("%s: violations %v, want %d", name, got, tc.wantViol)
		}
		if tc.digest != "" && s.Digest != tc.digest {
			t.Errorf("%s: digest %s, want %s", name, s.Digest, tc.digest)
		}
	}
	if _, err := c.ForTask("score", "sha256:0000"); !errors.Is(err, ErrSchemaNotFound) {
		t.Errorf("unknown version: %v, want ErrSchemaNotFound", err)
	}
	// Archived bytes that do not digest to their key are refused.
	archive.docs[v1.Digest] = []byte(scoreV2)
	if _, err := newCatalog(t, scoreV2, archive).ForTask("score", v1.Digest); err == nil {
		t.Error("a tampered archive entry was accepted")
	}
}

func newCatalog(t *testing.T, score string, archive Archive) *Catalog {
	t.Helper()
	c, err := NewCatalog(registry(t, map[string]string{"score.json": score}), archive)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type failingArchive struct{}

func (failingArchive) Put(string, []byte) error   { return errors.New("store down") }
func (failingArchive) Get(string) ([]byte, error) { return nil, ErrSchemaNotFound }

// A reload whose archive write fails changes nothing.
func TestCatalogReloadIsAllOrNothing(t *testing.T) {
	c, err := NewCatalog(registry(t, map[string]string{"score.json": scoreV1}), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.archive = failingArchive{}
	if _, err := c.Reload(registry(t, map[string]string{"score.json": scoreV2})); err == nil {
		t.Fatal("reload succeeded with a failing archive")
	}
	s, _ := c.Get("score")
	if len(s.Validate(json.RawMessage(`{"score":1}`))) != 0 {
		t.Error("the failed reload replaced v1")
	}
	if _, err := NewCatalog(registry(t, map[string]string{"score.json": scoreV1}), failingArchive{}); err == nil {
		t.Error("NewCatalog succeeded with a failing archive")
	}
}
