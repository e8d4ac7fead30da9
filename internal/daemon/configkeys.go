package daemon

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/a2ad/a2ad/internal/suggest"
	"github.com/a2ad/a2ad/mcpedge"
	"go.yaml.in/yaml/v3"
)

// KeyError is a key of a configuration file that a2ad refuses: one it
// does not know (Suggestion names the known key nearest to it, "" when
// none is close), or one set to a value that cannot stand (Reason).
type KeyError struct {
	// Key is the key's path as the file spells it: "http_addr",
	// "auth.audience", "agents[0].evidence_keys".
	Key string
	// Line is the key's line in the file, from 1.
	Line int
	// Suggestion is the known key the operator most likely meant.
	Suggestion string
	// Reason, when set, says what is wrong with a known key's value and
	// what is wanted; empty for an unknown key.
	Reason string
	// inline: Reason goes on from Key without a colon (`log.level
	// "verbose": want …`, `--- starts a second YAML document`).
	inline bool
}

func (e *KeyError) Error() string {
	at := ""
	if e.Line > 0 {
		at = fmt.Sprintf("line %d: ", e.Line)
	}
	if e.Reason != "" && e.inline {
		return at + e.Key + " " + e.Reason
	}
	if e.Reason != "" {
		return at + e.Key + ": " + e.Reason
	}
	msg := fmt.Sprintf("%sunknown key %s", at, e.Key)
	if e.Suggestion != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", e.Suggestion)
	}
	return msg
}

// checkKeys returns a [*KeyError] for every key of doc (a YAML document
// node) that Config has no field for, in the file's order, and for the
// keys whose values are set but cannot stand: an empty auth.audience
// (tokens would be accepted for any resource) and an unknown scope in
// principal.scopes.
func checkKeys(root *yaml.Node) []error {
	if root == nil {
		return nil
	}
	var errs []error
	walkKeys(root, reflect.TypeFor[Config](), "", &errs)
	if auth := mappingValue(root, "auth"); auth != nil {
		if aud, key := mappingValue(auth, "audience"), mappingKey(auth, "audience"); aud != nil &&
			(aud.Kind == yaml.ScalarNode && strings.TrimSpace(aud.Value) == "" || aud.Tag == "!!null") {
			errs = append(errs, &KeyError{Key: "auth.audience", Line: key.Line,
				Reason: "empty: give the resource identifier hosts' tokens must name in aud (RFC 8707), e.g. https://a2ad.example.com/mcp, or leave the key out for the default, the URL of a2ad's /mcp"})
		}
	}
	if pr := mappingValue(root, "principal"); pr != nil {
		if sc := mappingValue(pr, "scopes"); sc != nil && sc.Kind == yaml.SequenceNode {
			for i, n := range sc.Content {
				if err := mcpedge.CheckScopes([]string{n.Value}); n.Kind == yaml.ScalarNode && err != nil {
					errs = append(errs, &KeyError{Key: "principal.scopes[" + strconv.Itoa(i) + "]", Line: n.Line, Reason: err.Error()})
				}
			}
		}
	}
	return errs
}

// walkKeys checks the keys of mapping n against the fields of t (a
// struct), and goes down into the fields that are structs, lists of
// structs and maps of structs.
func walkKeys(n *yaml.Node, t reflect.Type, prefix string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n != nil && prefix != "" {
		if err := typeFault(n, t, prefix); err != nil {
			*errs = append(*errs, err)
			return
		}
	}
	switch {
	case n == nil || decodesItselfFromYAML(t):
		return
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, item := range n.Content {
				walkKeys(item, t.Elem(), prefix+"["+strconv.Itoa(i)+"]", errs)
			}
		}
		return
	case t.Kind() == reflect.Map:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				walkKeys(n.Content[i+1], t.Elem(), prefix+"["+n.Content[i].Value+"]", errs)
			}
		}
		return
	case t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode:
		return // a scalar, checked above
	}
	fields := yamlFields(t)
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" {
			continue // a merge key: its mapping is decoded into the same struct
		}
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		ft, ok := fields[k.Value]
		if !ok {
			e := &KeyError{Key: key, Line: k.Line}
			if s := suggest.Closest(k.Value, names); s != "" {
				e.Suggestion = strings.TrimSuffix(key, k.Value) + s
			}
			*errs = append(*errs, e)
			continue
		}
		walkKeys(v, ft, key, errs)
	}
}

// yamlFields maps each key a struct of type t takes, as go.yaml.in/yaml/v3
// names it (the yaml tag, else the lower-cased field name; inline structs'
// fields as their own), to the field's type.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

var (
	yamlUnmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItselfFromYAML: a type that decodes itself takes whatever keys it
// wants; the decoder reports its errors.
func decodesItselfFromYAML(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(yamlUnmarshalerType) || p.Implements(textUnmarshalerType)
}

// mappingKey and mappingValue are the key and value nodes of key in
// mapping n (nil if absent).
func mappingKey(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// checkPrincipal refuses principal scopes a2ad does not know: a typo
// (a2a:delegat) would otherwise leave stdio hosts without the tools the
// operator meant to give them, silently.
func (c Config) checkPrincipal() error {
	if err := mcpedge.CheckScopes(c.Principal.Scopes); err != nil {
		return fmt.Errorf("config: principal.scopes: %w", err)
	}
	for name, p := range c.Principals {
		if err := mcpedge.CheckScopes(p.Scopes); err != nil {
			return fmt.Errorf("config: principals[%s].scopes: %w", name, err)
		}
	}
	if strings.TrimSpace(c.Auth.Audience) == "" && c.Auth.Audience != "" {
		return errors.New("config: auth.audience is blank: give the resource identifier hosts' tokens must name in aud, or leave it out for the default")
	}
	return nil
}
