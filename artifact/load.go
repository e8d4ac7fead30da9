package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/xeipuuv/gojsonreference"
	"github.com/xeipuuv/gojsonschema"
)

// ErrSchemaNotFound is wrapped by the error [Registry.Get] returns for a name
// the registry does not hold.
var ErrSchemaNotFound = errors.New("artifact: no host schema with that name")

// A LoadError is a schema file refused at load time: it is not JSON, its top
// level is not an object, it is not draft-07 or uses a later draft's
// keyword, it could reach outside the schema directory (a $ref to
// something the directory does not hold, a base-changing $id below the top
// level), a $ref dangles or loops in place, or it does not compile. See
// [LoadFS] for the rules.
type LoadError struct {
	File    string // file name, e.g. "risk_assessment.json"
	Pointer string // RFC 6901 JSON pointer to the offending key in the file, "" for the whole file
	Reason  string // what is wrong, e.g. "remote $ref refused"
}

// Error returns "artifact: schema FILE at POINTER: REASON", or
// "artifact: schema FILE: REASON" when Pointer is "".
func (e *LoadError) Error() string {
	if e.Pointer == "" {
		return "artifact: schema " + e.File + ": " + e.Reason
	}
	return "artifact: schema " + e.File + " at " + e.Pointer + ": " + e.Reason
}

// A Schema is one compiled host schema. It is immutable after load and safe
// for concurrent use by multiple goroutines.
//
// A schema that references other schemas of its directory ($ref by $id)
// means what those files say too, so its version covers them: Digest is
// then the SHA-256 of its bundle (the line "a2ad-schema-bundle/1", then a
// JSON record of the names and bytes of its file and of every file it
// references, directly or through them), which the [Archive] keeps (not
// JSON, so an a2ad that predates bundles refuses it rather than read it as
// a schema); and Document, which a brief
// carries to an agent that cannot read the directory, is the schema with
// those schemas put in its "definitions" (as "a2ad:<name>", each keeping
// its $id), so that its $refs resolve within the one document
// (draft-handrews-json-schema-01 §8.2.4).
type Schema struct {
	Name     string          // file name without ".json", e.g. "risk_assessment"
	Digest   string          // "sha256:" + lowercase hex of the file bytes (of the bundle, for a schema that references others)
	Document json.RawMessage // the file bytes, compacted with json.Compact (with the referenced schemas embedded, see above)

	compiled *gojsonschema.Schema
	source   []byte // the file bytes, which Digest digests (Catalog archives them)
	// names holds every property name the schema declares (keys of
	// "properties", entries of "required" and "dependencies"): the only
	// object keys a Violation pointer may name.
	names map[string]bool
}

// A Registry holds the host schemas loaded from one directory, by name. It is
// immutable after load and safe for concurrent use.
type Registry struct {
	schemas map[string]*Schema
	names   []string // sorted
}

// LoadDir loads and compiles every file whose name ends in ".json"
// directly in dir (subdirectories are not read) into a Registry; each schema
// is named after its file without ".json". Each must be a regular file (or
// a symlink to one) of at most [MaxSchemaFileBytes]: a named pipe, a
// device, a socket or a larger file is refused with a *[LoadError] naming
// it, before anything is read from it. An empty dir gives an empty
// Registry. A missing or unreadable dir is an error wrapping the
// [io/fs.PathError]. A file refused by the load-time rules (see [LoadFS])
// gives a *[LoadError] per broken rule: every fault of every file is
// named at once, joined with [errors.Join] when there are several (files in
// name order, each in document order; [errors.As] finds the first). The
// rules about references are checked once every file passes the others. No
// partial Registry is returned.
func LoadDir(dir string) (*Registry, error) {
	if dir == "" {
		return nil, errors.New("artifact: schema directory not set")
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("artifact: schema directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("artifact: schema directory %s is not a directory", dir)
	}
	return LoadFS(os.DirFS(dir), ".")
}

// LoadFS is [LoadDir] on directory dir of fsys (dir is an [io/fs] path, "."
// for the root).
//
// Every schema must follow these rules, checked before compiling; each
// refusal is a *[LoadError] naming the file and the JSON pointer of the
// offending key:
//   - the file is valid JSON whose top level is an object;
//   - it is JSON Schema draft-07: "$schema" is absent or the draft-07
//     meta-schema URI, "http://json-schema.org/draft-07/schema#" or
//     "https://json-schema.org/draft-07/schema#", each also without the
//     trailing "#", at the top level and in every subschema;
//   - no subschema uses a keyword of JSON Schema 2019-09 or 2020-12 that
//     changes what it accepts ("unevaluatedProperties", "unevaluatedItems",
//     "prefixItems", "dependentRequired", "dependentSchemas",
//     "minContains", "maxContains", "$anchor", "$dynamicRef",
//     "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
//     "$vocabulary", "contentSchema"): the draft-07 validator would ignore
//     it, and the schema would accept what it says it refuses. "$defs" is
//     accepted as a place for subschemas, like "definitions";
//   - no keyword that asserts or applies subschemas stands beside a
//     "$ref" (draft-07 ignores the siblings of "$ref"; annotations,
//     "$id", "$schema" and "definitions"/"$defs" may), and every "format"
//     is one gojsonschema checks ([CheckedFormats]);
//   - every keyword value the compiler would refuse that these checks
//     know is named at its pointer: a "pattern" or "patternProperties"
//     key Go's regexp does not compile, a "type" that names no draft-07
//     type, a "required" that is not an array of distinct strings, a
//     count ("minLength", …) that is not a non-negative integer, a bound
//     that is not a number, "multipleOf" not above 0, "uniqueItems" not a
//     boolean. "enum" and "const" values are data: nothing in them is
//     checked or resolved (gojsonschema does neither);
//   - the top-level "$id", if any, is a plain-name fragment "#name" or an
//     absolute URI without a fragment (an empty one is dropped), not
//     file:; no two schemas of the directory have the same URI;
//   - every "$id" below the top level, and every draft-04 style "id" in a
//     subschema (gojsonschema honours both), is a plain-name fragment
//     "#name", since any other value changes the base URI; no plain name is
//     defined twice in a file;
//   - every "$ref", anywhere in the file, is a local fragment ("#", "#/…"
//     or "#name") or names another schema of the directory by its
//     top-level $id: absolute, or relative to the file's own $id, with or
//     without a fragment ("address.json#/definitions/postcode"). Nothing
//     else is ever resolved: no file: reference, no URI the directory does
//     not hold;
//   - every $ref the compiler follows resolves to a subschema (not to a
//     value under "default", "enum", a "properties" map, …);
//   - no cycle of $refs, within a file or across files, applies a schema to
//     the same value again without descending into it ({"$ref": "#"},
//     {"allOf": [{"$ref": "#"}]}): gojsonschema would recurse until the
//     stack overflows, which kills the process;
//   - it compiles (github.com/xeipuuv/gojsonschema v1.2.0, draft-07 mode),
//     with the schemas it references given to the compiler by their $id.
//
// Compilation uses a loader that refuses every external load, so even a
// reference these checks missed fetches nothing, over the network or from
// the file system.
func LoadFS(fsys fs.FS, dir string) (*Registry, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("artifact: schema directory: %w", err)
	}
	var files []srcFile
	var refused []error
	for _, e := range entries {
		file := e.Name()
		if !strings.HasSuffix(file, ".json") || e.IsDir() {
			continue
		}
		b, err := readSchemaFile(fsys, path.Join(dir, file), file)
		var le *LoadError
		switch {
		case errors.As(err, &le):
			refused = append(refused, err)
			continue
		case err != nil:
			return nil, err
		case b == nil: // a symlink to a directory: not read, as subdirectories are not
			continue
		}
		files = append(files, srcFile{name: file, b: b})
	}
	if len(refused) > 0 {
		// Name these with every fault of the files that could be read.
		if _, err := loadFiles(files); err != nil {
			refused = append(refused, err)
		}
		return nil, joinInFileOrder(refused)
	}
	return loadFiles(files)
}

// joinInFileOrder joins load errors as [joinLoadErrors] does, files in
// name order (stable: each file's faults keep their order).
func joinInFileOrder(errs []error) error {
	err := joinLoadErrors(errs)
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	flat := slices.Clone(j.Unwrap())
	file := func(e error) string {
		var le *LoadError
		if !errors.As(e, &le) {
			return ""
		}
		return le.File
	}
	slices.SortStableFunc(flat, func(a, b error) int { return strings.Compare(file(a), file(b)) })
	return errors.Join(flat...)
}

// MaxSchemaFileBytes bounds one schema file: a larger one is refused
// unread. A schema travels in every brief that names it, which must fit
// one NATS message (1 MiB by default).
const MaxSchemaFileBytes = 1 << 20

// readSchemaFile reads schema file p of fsys (named file in errors). The
// entry, or what its symlink points at, must be a regular file: a named
// pipe would block the read forever and a device such as /dev/zero never
// ends, so anything else is a *LoadError, found by stat before the file is
// opened. At most MaxSchemaFileBytes are read. A directory gives nil, nil.
func readSchemaFile(fsys fs.FS, p, file string) ([]byte, error) {
	fi, err := fs.Stat(fsys, p) // follows a symlink
	if err != nil {
		return nil, fmt.Errorf("artifact: read schema %s: %w", file, err)
	}
	if fi.IsDir() {
		return nil, nil
	}
	if !fi.Mode().IsRegular() {
		return nil, &LoadError{File: file, Reason: "not a regular file (" + fileKind(fi.Mode()) + "): a schema is a regular file, or a symlink to one"}
	}
	tooLarge := &LoadError{File: file, Reason: fmt.Sprintf("larger than %d bytes (1 MiB), the most a schema file may hold", MaxSchemaFileBytes)}
	if fi.Size() > MaxSchemaFileBytes {
		return nil, tooLarge
	}
	f, err := fsys.Open(p)
	if err != nil {
		return nil, fmt.Errorf("artifact: read schema %s: %w", file, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSchemaFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("artifact: read schema %s: %w", file, err)
	}
	if len(b) > MaxSchemaFileBytes {
		return nil, tooLarge // it grew since the stat
	}
	return b, nil
}

// fileKind names the type of a file that is not regular.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "of mode " + m.Type().String()
}

// Get returns the schema named name. For a name the registry does not hold,
// the error wraps [ErrSchemaNotFound] and quotes the name. A nil Registry
// holds no schema.
func (r *Registry) Get(name string) (*Schema, error) {
	if r != nil {
		if s, ok := r.schemas[name]; ok {
			return s, nil
		}
	}
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	e := &SchemaNotFoundError{Name: name}
	if r != nil {
		e.Total = len(r.names)
		e.Known = slices.Clone(r.names[:min(len(r.names), MaxListedSchemaNames)])
	}
	return nil, e
}

// MaxListedSchemaNames bounds the names a [SchemaNotFoundError] lists.
const MaxListedSchemaNames = 20

// A SchemaNotFoundError is [Registry.Get]'s error for a name the registry
// does not hold: the name asked for (at most 64 bytes, then "…"), the
// first [MaxListedSchemaNames] names it holds, sorted, and how many it
// holds in all. It wraps [ErrSchemaNotFound].
type SchemaNotFoundError struct {
	Name  string
	Known []string
	Total int
}

// Error says, in a2ad's words, that no host schema has the name, and
// which ones there are: `no host schema named "x"; the host schemas are
// a, b (and 3 more)`.
func (e *SchemaNotFoundError) Error() string {
	if e.Total == 0 {
		return fmt.Sprintf("no host schema named %q; there are no host schemas", e.Name)
	}
	msg := fmt.Sprintf("no host schema named %q; the host schemas are %s", e.Name, strings.Join(e.Known, ", "))
	if more := e.Total - len(e.Known); more > 0 {
		msg += fmt.Sprintf(" (and %d more)", more)
	}
	return msg
}

func (e *SchemaNotFoundError) Unwrap() error { return ErrSchemaNotFound }

// Names returns the names of the registry's schemas in increasing order, in a
// new slice. A nil or empty Registry gives an empty (nil) slice.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

// A srcFile is one schema file: its name in the directory and its bytes.
type srcFile struct {
	name string
	b    []byte
}

// A parsed schema file has passed the rules that need only the file itself;
// the rules about references ([refGraph]) need every file of the directory.
type parsed struct {
	file, name string
	b          []byte
	root       *onode
	c          *checker
	// id is the absolute URI the top-level "$id" gives the schema (as
	// gojsonschema's pool keys it), "" without one.
	id string
}

// parse applies the load-time rules that need only the file (its bytes b).
func parse(file string, b []byte) (*parsed, error) {
	name := strings.TrimSuffix(file, ".json")
	if name == "" {
		return nil, &LoadError{File: file, Reason: "file name gives an empty schema name"}
	}
	refuse := func(ptr, reason string) error { return &LoadError{File: file, Pointer: ptr, Reason: reason} }

	// json.Valid also bounds the nesting depth (10000), which bounds the
	// recursion of parseOrdered and checkSchema below.
	if !json.Valid(b) {
		return nil, refuse("", "not valid JSON")
	}
	root, err := parseOrdered(b)
	if err != nil {
		return nil, refuse("", "not valid JSON")
	}
	if root.kind != kindObject {
		return nil, refuse("", "top level is not a JSON object")
	}
	if v, ok := root.member("$schema"); ok && v.kind != kindString {
		return nil, refuse("/$schema", "$schema is not a string")
	}
	c := checker{names: make(map[string]bool), schemas: make(map[*onode]string), root: root}
	c.checkSchema(root, "")
	if len(c.faults) > 0 {
		return nil, c.loadError(file)
	}
	return &parsed{file: file, name: name, b: b, root: root, c: &c, id: c.rootID}, nil
}

// loadFiles applies every load-time rule to files (in this order) and
// compiles each into a Registry.
func loadFiles(files []srcFile) (*Registry, error) {
	docs := make([]*parsed, 0, len(files))
	byID := make(map[string]*parsed)
	var errs []error
	for _, f := range files {
		d, err := parse(f.name, f.b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if d.id != "" {
			if other, dup := byID[d.id]; dup {
				errs = append(errs, &LoadError{File: d.file, Pointer: "/$id", Reason: "$id " + clip(d.id) + " already identifies " + other.file})
				continue
			}
			byID[d.id] = d
		}
		docs = append(docs, d)
	}
	if len(errs) > 0 {
		// Name what the compiler refuses in the files that passed, with
		// the faults of the others. A file that references another is
		// compiled only once every file passes (its references need the
		// reference rules first).
		for _, d := range docs {
			if len(d.c.ext) > 0 {
				continue
			}
			if _, err := compileGo(d.b, nil); err != nil {
				errs = append(errs, &LoadError{File: d.file, Reason: "does not compile: " + err.Error()})
			}
		}
		return nil, joinInFileOrder(errs)
	}
	g := newRefGraph(docs, byID)
	if err := g.check(); err != nil {
		return nil, err
	}
	r := &Registry{schemas: make(map[string]*Schema)}
	for _, d := range docs {
		s, err := d.build(g.deps(d))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.schemas[s.Name] = s
		r.names = append(r.names, s.Name)
	}
	if len(errs) > 0 {
		return nil, joinLoadErrors(errs)
	}
	slices.Sort(r.names)
	return r, nil
}

// build compiles d, with deps, the other schemas it references directly
// or through them (sorted by file name).
func (d *parsed) build(deps []*parsed) (*Schema, error) {
	refuse := func(ptr, reason string) error { return &LoadError{File: d.file, Pointer: ptr, Reason: reason} }
	var compact bytes.Buffer
	if err := json.Compact(&compact, d.b); err != nil {
		return nil, refuse("", "not valid JSON")
	}
	compiled, err := compileGo(d.b, deps)
	if err != nil {
		return nil, refuse("", "does not compile: "+err.Error())
	}
	s := &Schema{Name: d.name, Document: json.RawMessage(compact.Bytes()), compiled: compiled, source: d.b, names: d.c.names}
	if len(deps) > 0 {
		s.names = maps.Clone(d.c.names)
		for _, dep := range deps {
			maps.Copy(s.names, dep.c.names)
		}
		if s.source, err = bundle(d, deps); err != nil {
			return nil, refuse("", err.Error())
		}
		doc, err := embed(d, deps)
		if err != nil {
			return nil, refuse("/definitions", err.Error())
		}
		s.Document = doc
	}
	sum := sha256.Sum256(s.source)
	s.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return s, nil
}

// compileGo compiles schema b with gojsonschema in draft-07 mode, with a
// loader that refuses every external load. A panic in the compiler is
// returned as an error.
func compileGo(b []byte, deps []*parsed) (s *gojsonschema.Schema, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("schema compiler panicked: %v", p)
		}
	}()
	doc, err := decodeUseNumber(b)
	if err != nil {
		return nil, err
	}
	sl := gojsonschema.NewSchemaLoader()
	sl.Draft = gojsonschema.Draft7
	sl.AutoDetect = false
	// Validate must stay false: metaschema validation compiles the
	// metaschema with gojsonschema's own file/HTTP loader factory and
	// leaves that factory in the shared pool.
	sl.Validate = false
	// The schemas b references are put in the compiler's pool under their
	// $id (decoded afresh: the pool rewrites their $refs in place), so
	// it resolves them without a load.
	for _, dep := range deps {
		dd, err := decodeUseNumber(dep.b)
		if err != nil {
			return nil, err
		}
		if err := sl.AddSchemas(rootLoader{doc: dd}); err != nil {
			return nil, fmt.Errorf("%s: %w", dep.file, err)
		}
	}
	return sl.Compile(rootLoader{doc: doc})
}

// decodeUseNumber decodes one JSON value the way gojsonschema does (numbers
// as json.Number).
func decodeUseNumber(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// errExternalRef is returned by every load through refusingFactory.
var errExternalRef = errors.New("external reference refused")

// rootLoader hands gojsonschema an already decoded document (a schema at
// compile time, an instance at validation time) and makes refusingFactory
// the factory for every reference resolved from it.
type rootLoader struct{ doc any }

func (l rootLoader) JsonSource() any                               { return l.doc }
func (l rootLoader) LoadJSON() (any, error)                        { return l.doc, nil }
func (l rootLoader) LoaderFactory() gojsonschema.JSONLoaderFactory { return refusingFactory{} }
func (l rootLoader) JsonReference() (gojsonreference.JsonReference, error) {
	return gojsonreference.NewJsonReference("#")
}

// refusingFactory is the gojsonschema.JSONLoaderFactory of every compile: the
// loaders it makes fail without touching the network or the file system.
type refusingFactory struct{}

func (refusingFactory) New(source string) gojsonschema.JSONLoader { return refusedLoader{source} }

type refusedLoader struct{ source string }

func (l refusedLoader) JsonSource() any                               { return l.source }
func (l refusedLoader) LoadJSON() (any, error)                        { return nil, errExternalRef }
func (l refusedLoader) LoaderFactory() gojsonschema.JSONLoaderFactory { return refusingFactory{} }
func (l refusedLoader) JsonReference() (gojsonreference.JsonReference, error) {
	return gojsonreference.NewJsonReference(l.source)
}

// Accepted values of "$schema": the draft-07 meta-schema URI, in http and
// https, with and without the empty fragment.
const draft07URI = "http://json-schema.org/draft-07/schema#"

// draft07Spellings names every accepted spelling, for the refusal.
const draft07Spellings = `"http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema", "https://json-schema.org/draft-07/schema#" or "https://json-schema.org/draft-07/schema"`

var draft07URIs = map[string]bool{
	draft07URI: true, "http://json-schema.org/draft-07/schema": true,
	"https://json-schema.org/draft-07/schema#": true, "https://json-schema.org/draft-07/schema": true,
}

// laterKeywords are the keywords of JSON Schema 2019-09 and 2020-12 that
// change what a schema accepts, by the version that brought them.
// gojsonschema (draft-07) ignores them, so a schema using one would accept
// what it says it refuses: it is refused at load.
var laterKeywords = map[string]string{
	"unevaluatedProperties": "2019-09", "unevaluatedItems": "2019-09",
	"dependentRequired": "2019-09", "dependentSchemas": "2019-09",
	"minContains": "2019-09", "maxContains": "2019-09",
	"$anchor": "2019-09", "$recursiveRef": "2019-09", "$recursiveAnchor": "2019-09", "$vocabulary": "2019-09",
	"prefixItems": "2020-12", "$dynamicRef": "2020-12", "$dynamicAnchor": "2020-12",
	"contentSchema": "2019-09",
}

// plainName matches a draft-07 plain-name fragment (draft-handrews-json-
// schema-01 §8.2.3, which defers to XML NCName; ASCII subset).
var plainName = regexp.MustCompile(`^#[A-Za-z][-A-Za-z0-9._:]*$`)

// localRef reports whether ref is a local fragment: "#", "#/…" or "#name".
func localRef(ref string) bool {
	return ref == "#" || strings.HasPrefix(ref, "#/") || plainName.MatchString(ref)
}

// checker walks a schema in document order, records the first rule it
// breaks and collects the property names the schema declares.
type checker struct {
	names   map[string]bool
	schemas map[*onode]string // every node at a schema position, with its pointer
	root    *onode
	rootID  string   // the absolute URI of the top-level "$id", normalised as gojsonschema keys it
	ext     []extRef // every "$ref" that is not a local fragment, in document order
	ids     map[string]*onode
	faults  []fault // every rule broken, in document order
}

// A fault is one broken rule: the JSON pointer of the key and the reason.
type fault struct{ ptr, reason string }

// An extRef is a "$ref" naming another document, at pointer ptr.
type extRef struct{ ptr, ref string }

func (c *checker) fail(ptr, reason string) {
	c.faults = append(c.faults, fault{ptr, reason})
}

// loadError returns c's faults as the error of file: a *LoadError, or
// several joined.
func (c *checker) loadError(file string) error {
	errs := make([]error, len(c.faults))
	for i, f := range c.faults {
		errs[i] = &LoadError{File: file, Pointer: f.ptr, Reason: f.reason}
	}
	return joinLoadErrors(errs)
}

// joinLoadErrors returns nil for none, the one *LoadError, or several
// joined (errors.Join): [errors.As] finds the first.
func joinLoadErrors(errs []error) error {
	var flat []error
	for _, e := range errs {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			flat = append(flat, j.Unwrap()...)
		} else {
			flat = append(flat, e)
		}
	}
	errs = flat
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

// Keywords of draft-07 whose value is a subschema, an array of subschemas,
// or an object of subschemas. Data keywords (enum, const, default, examples)
// are walked for $ref/$id too, but never compiled as schemas.
var (
	kwSchema      = map[string]bool{"additionalItems": true, "additionalProperties": true, "contains": true, "propertyNames": true, "if": true, "then": true, "else": true, "not": true}
	kwSchemaArray = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true}
	// "$defs" (2019-09) is only a place for subschemas, which a $ref
	// reaches by pointer whatever the draft: it means the same here.
	kwSchemaMap = map[string]bool{"properties": true, "patternProperties": true, "definitions": true, "$defs": true, "dependencies": true}
)

// checkSchema checks n, a (sub)schema at pointer ptr.
func (c *checker) checkSchema(n *onode, ptr string) {
	if n.kind != kindObject {
		// true and false are schemas too; anything else is the compiler's
		// to refuse, but is still searched for "$ref" and "$id".
		if n.kind == kindBool {
			c.schemas[n] = ptr
		}
		c.checkData(n, ptr)
		return
	}
	c.schemas[n] = ptr
	ref, hasRef := n.member("$ref")
	hasRef = hasRef && ref.kind == kindString
	for _, m := range n.members {
		p := ptr + "/" + escapeToken(m.key)
		v := m.val
		switch {
		case hasRef && ignoredBesideRef[m.key]:
			c.fail(p, fmt.Sprintf("keyword %s beside $ref refused: in draft-07 a $ref makes its siblings ignored, so the schema would accept what it says it refuses; wrap them in allOf: {\"allOf\": [{\"$ref\": …}, {%q: …}]}", m.key, m.key))
		case m.key == "$schema":
			if v.kind == kindString && !draft07URIs[v.str] {
				c.fail(p, fmt.Sprintf("dialect %q refused: only draft-07 is supported, as %s", clip(v.str), draft07Spellings))
			}
		case laterKeywords[m.key] != "":
			c.fail(p, fmt.Sprintf("keyword %s refused: it is JSON Schema %s, which the draft-07 validator would ignore, so the schema would accept what it says it refuses",
				m.key, laterKeywords[m.key]))
		case m.key == "$ref":
			c.checkRef(v, p)
		case m.key == "enum" || m.key == "const":
			// Values, not schemas: gojsonschema neither compiles nor
			// resolves anything inside them (schemaPool skips them too).
		case m.key == "pattern":
			c.checkPattern(v, p)
		case m.key == "format":
			c.checkFormat(v, p)
		case m.key == "type":
			c.checkType(v, p)
		case countKeywords[m.key]:
			c.checkCount(v, p, m.key)
		case boundKeywords[m.key]:
			c.checkBound(v, p, m.key)
		case m.key == "uniqueItems":
			if v.kind != kindBool {
				c.fail(p, "uniqueItems must be true or false")
			}
		case m.key == "$id" && n == c.root:
			c.checkRootID(v, p)
		case m.key == "$id" || m.key == "id":
			c.checkID(v, p, m.key)
		case m.key == "items":
			if v.kind == kindArray {
				for i, e := range v.elems {
					c.checkSchema(e, fmt.Sprintf("%s/%d", p, i))
				}
			} else {
				c.checkSchema(v, p)
			}
		case kwSchema[m.key]:
			c.checkSchema(v, p)
		case kwSchemaArray[m.key]:
			if v.kind != kindArray {
				c.checkData(v, p)
			}
			for i, e := range v.elems {
				c.checkSchema(e, fmt.Sprintf("%s/%d", p, i))
			}
		case kwSchemaMap[m.key]:
			for _, sm := range v.members {
				sp := p + "/" + escapeToken(sm.key)
				if m.key == "patternProperties" {
					if _, err := regexp.Compile(sm.key); err != nil {
						c.fail(sp, "patternProperties key is not a regular expression Go's regexp accepts (RE2 syntax: no look-around, no back-references): "+regexpReason(err))
					}
				}
				if m.key == "properties" || m.key == "dependencies" {
					c.names[sm.key] = true
				}
				if m.key == "dependencies" && sm.val.kind == kindArray {
					c.collectNames(sm.val)
					c.checkData(sm.val, sp)
					continue
				}
				c.checkSchema(sm.val, sp)
			}
			if v.kind != kindObject {
				c.checkData(v, p)
			}
		case m.key == "required":
			c.collectNames(v)
			c.checkRequired(v, p)
			c.checkData(v, p)
		default: // data keywords, annotations and unknown keywords
			c.checkData(v, p)
		}
	}
}

// checkData checks n, a value that is not a schema: "$ref" and "$id" are
// refused there too unless they are local fragments.
func (c *checker) checkData(n *onode, ptr string) {
	switch n.kind {
	case kindObject:
		for _, m := range n.members {
			p := ptr + "/" + escapeToken(m.key)
			switch m.key {
			case "$ref":
				c.checkRef(m.val, p)
			case "$id":
				c.checkID(m.val, p, m.key)
			default:
				c.checkData(m.val, p)
			}
		}
	case kindArray:
		for i, e := range n.elems {
			c.checkData(e, fmt.Sprintf("%s/%d", ptr, i))
		}
	}
}

func (c *checker) checkRef(v *onode, p string) {
	if v.kind != kindString {
		c.checkData(v, p)
		return
	}
	if localRef(v.str) {
		return
	}
	if refKind(v.str) == "file" {
		c.fail(p, "file $ref refused: a $ref names a local fragment or the $id of a schema in the schema directory")
		return
	}
	// Whether it names a schema of the directory is known once every
	// file is read (refGraph.check).
	c.ext = append(c.ext, extRef{ptr: p, ref: v.str})
}

// refKind says what a $ref that is not a local fragment names: "file",
// "relative" (no scheme) or "remote".
func refKind(ref string) string {
	switch {
	case strings.HasPrefix(strings.ToLower(ref), "file:"):
		return "file"
	case !strings.Contains(ref, ":"):
		return "relative"
	}
	return "remote"
}

// checkRootID checks the top-level "$id": a plain-name fragment, or an
// absolute URI without a fragment (an empty one is allowed), which other
// schemas of the directory may $ref. The schema's own relative $refs
// resolve against it. A draft-04 "id" beside it would take its place in
// gojsonschema, so "$id" is then held to the plain-name rule.
func (c *checker) checkRootID(v *onode, p string) {
	if _, ok := c.root.member("id"); ok || v.kind != kindString || plainName.MatchString(v.str) {
		c.checkID(v, p, "$id")
		return
	}
	u, err := url.Parse(v.str)
	if err != nil || u.Scheme == "" || u.Fragment != "" || strings.EqualFold(u.Scheme, "file") {
		c.fail(p, "$id refused: at the top level it is a plain-name fragment (\"#name\") or an absolute URI without a fragment, not file:")
		return
	}
	ref, err := gojsonreference.NewJsonReference(v.str)
	if err != nil {
		c.fail(p, "$id refused: not a valid URI")
		return
	}
	c.rootID = poolKey(ref)
}

func (c *checker) checkID(v *onode, p, key string) {
	if v.kind != kindString {
		c.checkData(v, p)
		return
	}
	if !plainName.MatchString(v.str) {
		c.fail(p, key+" refused: below the top level only a plain-name fragment (\"#name\") is allowed, since any other value changes the base URI")
	}
}

// collectNames records the strings of array n as declared property names.
func (c *checker) collectNames(n *onode) {
	if n.kind != kindArray {
		return
	}
	for _, e := range n.elems {
		if e.kind == kindString {
			c.names[e.str] = true
		}
	}
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return strings.ToValidUTF8(s[:80], "") + "…"
	}
	return s
}

// escapeToken escapes one RFC 6901 reference token: "~" becomes "~0" and
// "/" becomes "~1".
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// onode is a JSON value that keeps object members in document order, so the
// load-time checks report the first offending key as it appears in the file.
type onode struct {
	kind    byte
	str     string // kindString; the number's text for a number (kindScalar)
	members []omember
	elems   []*onode
}

type omember struct {
	key string
	val *onode
}

const (
	kindScalar byte = iota // number, null
	kindBool
	kindString
	kindObject
	kindArray
)

// member returns the last value of key in object n (the one encoding/json
// and gojsonschema see).
func (n *onode) member(key string) (*onode, bool) {
	var v *onode
	for _, m := range n.members {
		if m.key == key {
			v = m.val
		}
	}
	return v, v != nil
}

// parseOrdered parses b, which must be valid JSON, into an onode tree.
func parseOrdered(b []byte) (*onode, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return n, nil
}

func parseValue(dec *json.Decoder) (*onode, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &onode{kind: kindObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				n.members = append(n.members, omember{k, v})
			}
			_, err := dec.Token() // '}'
			return n, err
		case '[':
			n := &onode{kind: kindArray}
			for dec.More() {
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, v)
			}
			_, err := dec.Token() // ']'
			return n, err
		}
		return nil, errors.New("unexpected delimiter")
	case string:
		return &onode{kind: kindString, str: t}, nil
	case bool:
		return &onode{kind: kindBool}, nil
	case json.Number:
		return &onode{kind: kindScalar, str: string(t)}, nil
	default:
		return &onode{kind: kindScalar}, nil
	}
}
