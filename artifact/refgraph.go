package artifact

import (
	"net/url"
	"strconv"
	"strings"
)

// checkRefGraph runs after checkSchema has found every $ref local. It
// resolves each $ref the compiler will follow the way gojsonschema v1.2.0
// does (schemaPool.GetDocument, gojsonpointer) and refuses the schema when
//   - a plain-name fragment ("$id" or draft-04 "id") is defined twice, since
//     gojsonschema would then resolve "#name" to either at random;
//   - a $ref is not a valid URI reference, names no defined plain name, or
//     points at nothing;
//   - a $ref points at something that is not a subschema (a value under
//     "default", "enum", a "properties" map, …);
//   - $refs form a cycle that never descends into the document, such as
//     {"$ref": "#"} or {"allOf": [{"$ref": "#"}]}: gojsonschema would
//     recurse without end on every document and overflow the stack, which
//     no recover can catch.
func (c *checker) checkRefGraph(root *onode) {
	ids := make(map[string]*onode)
	c.collectIDs(root, "", ids)
	if c.err != nil {
		return
	}
	g := refGraph{c: c, root: root, ids: ids, state: make(map[*onode]byte)}
	for _, n := range c.orderedSchemas(root) {
		if c.err != nil {
			return
		}
		g.visit(n, nil)
	}
}

// collectIDs records the plain-name fragments gojsonschema registers: in
// every object outside "const" and "enum", "id" if present, else "$id"
// (schemaPool.parseReferencesRecursive).
func (c *checker) collectIDs(n *onode, ptr string, ids map[string]*onode) {
	if c.err != nil {
		return
	}
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
				return
			}
			ids[v.str] = n
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

type refGraph struct {
	c     *checker
	root  *onode
	ids   map[string]*onode
	state map[*onode]byte // 0 unseen, 1 on the DFS path, 2 done
}

// An inPlace edge leads from a schema to a schema applied to the same
// instance; ref is the pointer of the "$ref" key for a $ref edge, "" for an
// edge to a subschema ("allOf", "not", "then", …).
type inPlace struct {
	to  *onode
	ref string
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
			if path[i].ref != "" {
				g.c.fail(path[i].ref, "$ref cycle that never descends into the document")
				return
			}
		}
		g.c.fail(g.c.schemas[n], "$ref cycle that never descends into the document")
		return
	case 2:
		return
	}
	g.state[n] = 1
	for _, e := range g.edges(n) {
		if g.c.err != nil {
			return
		}
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
	ptr := g.c.schemas[n]
	if v, ok := n.member("$ref"); ok && v.kind == kindString {
		p := ptr + "/$ref"
		t := g.resolve(v.str, p)
		if t == nil {
			return nil
		}
		return []inPlace{{to: t, ref: p}}
	}
	var out []inPlace
	add := func(t *onode) {
		if _, ok := g.c.schemas[t]; ok {
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

// resolve returns the schema node ref (at pointer p) points at, or nil after
// recording a failure.
func (g *refGraph) resolve(ref, p string) *onode {
	u, err := url.Parse(ref)
	if err != nil {
		g.c.fail(p, "$ref is not a valid URI reference")
		return nil
	}
	var t *onode
	switch frag := u.Fragment; {
	case frag == "":
		t = g.root
	case strings.HasPrefix(frag, "/"):
		t = g.root
		for tok := range strings.SplitSeq(frag[1:], "/") {
			t = step(t, strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~"))
			if t == nil {
				g.c.fail(p, "$ref "+clip(ref)+" points at nothing")
				return nil
			}
		}
	default:
		if t = g.ids["#"+frag]; t == nil {
			g.c.fail(p, "$ref "+clip(ref)+" names no $id")
			return nil
		}
	}
	if _, ok := g.c.schemas[t]; !ok {
		g.c.fail(p, "$ref "+clip(ref)+" does not point at a subschema")
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
