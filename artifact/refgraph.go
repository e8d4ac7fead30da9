package artifact

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/xeipuuv/gojsonreference"
)

// refGraph applies the rules about references, which need every file of
// the schema directory. It resolves each $ref the compiler will follow the
// way gojsonschema v1.2.0 does (schemaPool.GetDocument, gojsonpointer) and
// refuses a schema when
//   - a $ref that is not a local fragment names no schema of the
//     directory by its top-level $id (nothing is ever fetched), or is
//     relative in a schema without one;
//   - a plain-name fragment ("$id" or draft-04 "id") is defined twice in
//     one file, since gojsonschema would then resolve "#name" to either at
//     random;
//   - a $ref is not a valid URI reference, names no defined plain name, or
//     points at nothing;
//   - a $ref points at something that is not a subschema (a value under
//     "default", "enum", a "properties" map, …);
//   - $refs form a cycle that never descends into the document, such as
//     {"$ref": "#"} or {"allOf": [{"$ref": "#"}]}, within a file or
//     across files: gojsonschema would recurse without end on every
//     document and overflow the stack, which no recover can catch.
type refGraph struct {
	docs  []*parsed
	byID  map[string]*parsed
	owner map[*onode]*parsed // every schema-position node, with its file
	state map[*onode]byte    // 0 unseen, 1 on the DFS path, 2 done
	refs  map[*parsed]map[*parsed]bool
	errs  []error
	seen  map[LoadError]bool
}

func newRefGraph(docs []*parsed, byID map[string]*parsed) *refGraph {
	g := &refGraph{docs: docs, byID: byID, owner: make(map[*onode]*parsed), state: make(map[*onode]byte),
		refs: make(map[*parsed]map[*parsed]bool), seen: make(map[LoadError]bool)}
	for _, d := range docs {
		for n := range d.c.schemas {
			g.owner[n] = d
		}
	}
	return g
}

// fail records a broken rule once (a $ref is resolved for each check
// that needs it).
func (g *refGraph) fail(d *parsed, ptr, reason string) {
	e := LoadError{File: d.file, Pointer: ptr, Reason: reason}
	if !g.seen[e] {
		g.seen[e] = true
		g.errs = append(g.errs, &e)
	}
}

// check applies the rules; every broken one is returned, each a
// *LoadError (joined if several).
func (g *refGraph) check() error {
	for _, d := range g.docs {
		d.c.ids = make(map[string]*onode)
		d.c.collectIDs(d.root, "", d.c.ids)
		for _, f := range d.c.faults {
			g.fail(d, f.ptr, f.reason)
		}
		for _, e := range d.c.ext {
			g.document(d, e.ref, e.ptr)
		}
	}
	for _, d := range g.docs {
		for _, n := range d.c.orderedSchemas(d.root) {
			g.visit(n, nil)
		}
	}
	return joinLoadErrors(g.errs)
}

// deps returns the other schemas d references, directly or through them,
// sorted by file name.
func (g *refGraph) deps(d *parsed) []*parsed {
	seen := map[*parsed]bool{d: true}
	var out []*parsed
	queue := []*parsed{d}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for t := range g.refs[cur] {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
				queue = append(queue, t)
			}
		}
	}
	slices.SortFunc(out, func(a, b *parsed) int { return strings.Compare(a.file, b.file) })
	return out
}

// poolKey is the key gojsonschema's pool holds the document of ref under:
// its URI resolved and without the fragment.
func poolKey(ref gojsonreference.JsonReference) string {
	empty, _ := gojsonreference.NewJsonReference("")
	abs, err := empty.Inherits(ref)
	if err != nil {
		return ref.String()
	}
	u := *abs.GetUrl()
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// document returns the schema of the directory that ref, a $ref in d at
// pointer p that is not a local fragment, names by its $id, and the
// fragment within it; nil after recording a failure.
func (g *refGraph) document(d *parsed, ref, p string) *parsed {
	t, _ := g.target(d, ref, p)
	return t
}

func (g *refGraph) target(d *parsed, ref, p string) (*parsed, string) {
	r, err := gojsonreference.NewJsonReference(ref)
	if err != nil {
		g.fail(d, p, "$ref is not a valid URI reference")
		return nil, ""
	}
	kind := refKind(ref)
	if kind == "relative" && d.id == "" {
		g.fail(d, p, "relative $ref refused: the schema has no top-level $id to resolve it against, and nothing is ever fetched")
		return nil, ""
	}
	if d.id != "" {
		base, err := gojsonreference.NewJsonReference(d.id)
		var abs *gojsonreference.JsonReference
		if err == nil {
			abs, err = base.Inherits(r)
		}
		if err == nil {
			r = *abs
		} else {
			g.fail(d, p, "$ref is not a valid URI reference")
			return nil, ""
		}
	}
	key := poolKey(r)
	t := g.byID[key]
	if t == nil {
		g.fail(d, p, kind+" $ref refused: no schema in the schema directory has the $id "+clip(key)+
			"; references are resolved from the directory only, never fetched")
		return nil, ""
	}
	return t, r.GetUrl().Fragment
}

// collectIDs records the plain-name fragments gojsonschema registers: in
// every object outside "const" and "enum", "id" if present, else "$id"
// (schemaPool.parseReferencesRecursive).
func (c *checker) collectIDs(n *onode, ptr string, ids map[string]*onode) {
	switch n.kind {
	case kindArray:
		for i, e := range n.elems {
			c.collectIDs(e, ptr+"/"+strconv.Itoa(i), ids)
		}
	case kindObject:
		key := "$id"
		if _, ok := n.member("id"); ok {
			key = "id"
		}
		if v, ok := n.member(key); ok && v.kind == kindString && plainName.MatchString(v.str) {
			if _, dup := ids[v.str]; dup {
				c.fail(ptr+"/"+escapeToken(key), "plain-name fragment "+v.str+" defined twice")
			} else {
				ids[v.str] = n
			}
		}
		for _, m := range n.members {
			p := ptr + "/" + escapeToken(m.key)
			switch {
			case m.key == "const" || m.key == "enum":
			case (m.key == "properties" || m.key == "dependencies" || m.key == "patternProperties") && m.val.kind == kindObject:
				for _, sm := range m.val.members {
					c.collectIDs(sm.val, p+"/"+escapeToken(sm.key), ids)
				}
			default:
				c.collectIDs(m.val, p, ids)
			}
		}
	}
}

// orderedSchemas returns the schema-position nodes in document order.
func (c *checker) orderedSchemas(root *onode) []*onode {
	var out []*onode
	var walk func(n *onode)
	walk = func(n *onode) {
		if _, ok := c.schemas[n]; ok {
			out = append(out, n)
		}
		for _, m := range n.members {
			walk(m.val)
		}
		for _, e := range n.elems {
			walk(e)
		}
	}
	walk(root)
	return out
}

// An inPlace edge leads from a schema to a schema applied to the same
// instance; ref is the "$ref" key (its file and pointer) for a $ref edge,
// nil for an edge to a subschema ("allOf", "not", "then", …).
type inPlace struct {
	to  *onode
	ref *refAt
}

type refAt struct {
	d   *parsed
	ptr string
}

// visit is a depth-first search over in-place edges; path holds the edges
// taken to reach n.
func (g *refGraph) visit(n *onode, path []inPlace) {
	switch g.state[n] {
	case 1:
		// Back edge. The cycle is the tail of path after the edge that
		// first entered n (path ends with this back edge); every cycle has
		// a $ref edge, since the others go down the document. Report the
		// last one.
		start := 0
		for i := len(path) - 2; i >= 0; i-- {
			if path[i].to == n {
				start = i + 1
				break
			}
		}
		for i := len(path) - 1; i >= start; i-- {
			if r := path[i].ref; r != nil {
				g.fail(r.d, r.ptr, "$ref cycle that never descends into the document")
				return
			}
		}
		d := g.owner[n]
		g.fail(d, d.c.schemas[n], "$ref cycle that never descends into the document")
		return
	case 2:
		return
	}
	g.state[n] = 1
	for _, e := range g.edges(n) {
		g.visit(e.to, append(path, e))
	}
	g.state[n] = 2
}

// edges returns the in-place edges of schema n. As in gojsonschema, a schema
// with a $ref applies only the $ref.
func (g *refGraph) edges(n *onode) []inPlace {
	if n.kind != kindObject {
		return nil
	}
	d := g.owner[n]
	ptr := d.c.schemas[n]
	if v, ok := n.member("$ref"); ok && v.kind == kindString {
		p := ptr + "/$ref"
		t := g.resolve(d, v.str, p)
		if t == nil {
			return nil
		}
		return []inPlace{{to: t, ref: &refAt{d: d, ptr: p}}}
	}
	var out []inPlace
	add := func(t *onode) {
		if _, ok := d.c.schemas[t]; ok {
			out = append(out, inPlace{to: t})
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if v, ok := n.member(k); ok {
			for _, e := range v.elems {
				add(e)
			}
		}
	}
	for _, k := range []string{"not", "if", "then", "else"} {
		if v, ok := n.member(k); ok {
			add(v)
		}
	}
	if v, ok := n.member("dependencies"); ok && v.kind == kindObject {
		for _, m := range v.members {
			if last, _ := v.member(m.key); last == m.val {
				add(m.val)
			}
		}
	}
	return out
}

// resolve returns the schema node ref (a $ref in d at pointer p) points
// at, in d or in the schema of the directory it names, or nil after
// recording a failure.
func (g *refGraph) resolve(d *parsed, ref, p string) *onode {
	td, frag := d, ""
	if localRef(ref) {
		u, err := url.Parse(ref)
		if err != nil {
			g.fail(d, p, "$ref is not a valid URI reference")
			return nil
		}
		frag = u.Fragment
	} else {
		if td, frag = g.target(d, ref, p); td == nil {
			return nil
		}
		if td != d {
			if g.refs[d] == nil {
				g.refs[d] = make(map[*parsed]bool)
			}
			g.refs[d][td] = true
		}
	}
	var t *onode
	switch {
	case frag == "":
		t = td.root
	case strings.HasPrefix(frag, "/"):
		t = td.root
		for tok := range strings.SplitSeq(frag[1:], "/") {
			t = step(t, strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~"))
			if t == nil {
				g.fail(d, p, "$ref "+clip(ref)+" points at nothing")
				return nil
			}
		}
	default:
		if t = td.c.ids["#"+frag]; t == nil {
			g.fail(d, p, "$ref "+clip(ref)+" names no $id")
			return nil
		}
	}
	if _, ok := td.c.schemas[t]; !ok {
		g.fail(d, p, "$ref "+clip(ref)+" does not point at a subschema")
		return nil
	}
	return t
}

// step follows one decoded JSON pointer token from n as gojsonpointer does.
func step(n *onode, tok string) *onode {
	switch n.kind {
	case kindObject:
		v, _ := n.member(tok)
		return v
	case kindArray:
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(n.elems) {
			return nil
		}
		return n.elems[i]
	}
	return nil
}
