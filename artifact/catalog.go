package artifact

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// An Archive keeps host schema documents by digest beyond the life of one
// process, so a task delegated under a schema version that has since been
// replaced is still validated against that version after a restart.
// Implementations must be safe for concurrent use. a2ad keeps them in a KV
// bucket shared by its instances.
type Archive interface {
	// Put stores doc (the schema file bytes as loaded, which digest
	// digests) under digest
	// ("sha256:<hex>"); storing the same digest again is not an error.
	Put(digest string, doc []byte) error
	// Get returns the document stored under digest, or an error wrapping
	// [ErrSchemaNotFound].
	Get(digest string) ([]byte, error)
}

// A Catalog is the host schemas in force, which [Catalog.Reload] replaces
// as a whole (SIGHUP), and every version this process has known, by digest:
// a task is validated against the schema version recorded when it was
// delegated ([Catalog.ForTask]), not against whatever is loaded when its
// artifact arrives. It is safe for concurrent use.
type Catalog struct {
	archive Archive

	mu       sync.RWMutex
	current  *Registry
	byDigest map[string]*Schema

	subMu sync.Mutex
	subs  map[int]func()
	subN  int
}

// Subscribe calls fn after each [Catalog.Reload] that put schemas in
// force, whatever changed (the edge lists the schemas to hosts). fn must
// not block. The returned function ends the subscription.
func (c *Catalog) Subscribe(fn func()) (cancel func()) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.subs == nil {
		c.subs = map[int]func(){}
	}
	c.subN++
	n := c.subN
	c.subs[n] = fn
	return func() {
		c.subMu.Lock()
		delete(c.subs, n)
		c.subMu.Unlock()
	}
}

// NewCatalog returns a catalog whose current schemas are r. Every schema of
// r is put into archive (nil: versions are kept in memory only); a failed
// Put is returned and nothing is in force.
func NewCatalog(r *Registry, archive Archive) (*Catalog, error) {
	c := &Catalog{archive: archive, byDigest: map[string]*Schema{}}
	if _, err := c.Reload(r); err != nil {
		return nil, err
	}
	return c, nil
}

// Changes lists, by schema name, what a reload did.
type Changes struct {
	Added, Changed, Removed, Unchanged []string
}

// Reload puts r in force: new delegations use its schemas, tasks already
// delegated keep theirs. Each schema is archived first; if that fails,
// nothing changes and the error is returned.
func (c *Catalog) Reload(r *Registry) (Changes, error) {
	if r == nil {
		return Changes{}, errors.New("artifact: reload with no registry")
	}
	if c.archive != nil {
		for _, name := range r.names {
			s := r.schemas[name]
			if err := c.archive.Put(s.Digest, s.source); err != nil {
				return Changes{}, fmt.Errorf("artifact: archive schema %s: %w", name, err)
			}
		}
	}
	c.mu.Lock()
	var ch Changes
	for _, name := range r.names {
		s := r.schemas[name]
		c.byDigest[s.Digest] = s
		old, err := c.current.Get(name)
		switch {
		case err != nil:
			ch.Added = append(ch.Added, name)
		case old.Digest != s.Digest:
			ch.Changed = append(ch.Changed, name)
		default:
			ch.Unchanged = append(ch.Unchanged, name)
		}
	}
	for _, name := range c.current.Names() {
		if _, err := r.Get(name); err != nil {
			ch.Removed = append(ch.Removed, name)
		}
	}
	c.current = r
	c.mu.Unlock()
	c.subMu.Lock()
	fns := make([]func(), 0, len(c.subs))
	for _, fn := range c.subs {
		fns = append(fns, fn)
	}
	c.subMu.Unlock()
	for _, fn := range fns {
		fn()
	}
	return ch, nil
}

// Get returns the schema in force named name (errors as [Registry.Get]).
func (c *Catalog) Get(name string) (*Schema, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.current.Get(name)
}

// Names returns the names of the schemas in force, sorted.
func (c *Catalog) Names() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.current.Names()
}

// ForTask returns the schema version a task was delegated with: the one
// whose digest is digest, from memory or else from the archive (compiled
// under the load-time rules again and kept). With digest "" (a record from
// before versions were recorded) it is the schema in force named name. The
// error wraps [ErrSchemaNotFound] when no version with that digest is known.
func (c *Catalog) ForTask(name, digest string) (*Schema, error) {
	if digest == "" {
		return c.Get(name)
	}
	c.mu.RLock()
	s, ok := c.byDigest[digest]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	if c.archive == nil {
		return nil, fmt.Errorf("%w: %s version %s", ErrSchemaNotFound, name, digest)
	}
	doc, err := c.archive.Get(digest)
	if err != nil {
		return nil, fmt.Errorf("schema %s version %s: %w", name, digest, err)
	}
	s, err = fromArchive(name+".json", doc)
	if err != nil {
		return nil, err
	}
	if s.Digest != digest {
		// compile digests the bytes it is given: the archive returned
		// other bytes than were put.
		return nil, fmt.Errorf("artifact: archived schema %s: digest %s, want %s", name, s.Digest, digest)
	}
	c.mu.Lock()
	c.byDigest[digest] = s
	c.mu.Unlock()
	return s, nil
}

// Versions returns the digests this catalog holds in memory, sorted.
func (c *Catalog) Versions() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for d := range c.byDigest {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}
