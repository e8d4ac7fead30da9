package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/suggest"
	"go.yaml.in/yaml/v3"
)

// readDocument parses b as one YAML document. An empty file, or one of
// comments only, is an empty configuration (nil root: every default). A
// second document (after a `---` line) is a fault: a2ad would read the
// first only and ignore what the operator wrote after it.
func readDocument(b []byte) (root *yaml.Node, faults []error, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, yamlSyntaxError(err)
	}
	var second yaml.Node
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
	case err != nil:
		faults = append(faults, yamlSyntaxError(err))
	default:
		faults = append(faults, &KeyError{Key: "---", Line: second.Line, inline: true,
			Reason: "starts a second YAML document: a2ad reads one document per file and would ignore this one; put its keys in the first and remove the --- line"})
	}
	if len(doc.Content) == 0 {
		return nil, faults, nil
	}
	root = doc.Content[0]
	switch {
	case root.Kind == yaml.ScalarNode && root.Tag == "!!null":
		return nil, faults, nil
	case root.Kind != yaml.MappingNode:
		return nil, append(faults, &KeyError{Key: "the file", Line: root.Line, inline: true,
			Reason: "is not a mapping of keys (http_addr: …, agents: …): want the configuration's keys at the top level"}), nil
	}
	return root, faults, nil
}

// yamlSyntaxError is a YAML syntax error in a2ad's words: the line and
// what the parser could not read, without the library's "yaml:" prefix.
func yamlSyntaxError(err error) error {
	return fmt.Errorf("not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
}

// typeFault is the fault of value node n, of a key whose field has type t,
// when n cannot be decoded into t: nil when it can (or is null, the zero
// value). The reason says what is wanted in the configuration's terms.
func typeFault(n *yaml.Node, t reflect.Type, key string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" || n.Kind == yaml.AliasNode {
		return nil
	}
	got := n.Value
	switch n.Kind {
	case yaml.MappingNode:
		got = "a mapping of keys"
	case yaml.SequenceNode:
		got = "a list"
	default:
		got = strconv.Quote(got)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	want := ""
	switch {
	case t == reflect.TypeFor[time.Duration]() || t.Name() == "Duration":
		want = "a duration such as 90s, 15m or 2160h"
	case decodesItselfFromYAML(t):
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return &KeyError{Key: key, Line: n.Line, Reason: "want a value of another form, got " + got}
		}
		return nil
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		if n.Kind == yaml.MappingNode {
			return nil
		}
		want = "a mapping of keys (key: value lines indented under it)"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if n.Kind == yaml.SequenceNode {
			return nil
		}
		want = "a list"
		if n.Kind == yaml.ScalarNode && t.Elem().Kind() == reflect.String {
			items := strings.FieldsFunc(n.Value, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
			want = "a list, e.g. [" + strings.Join(items, ", ") + "]"
		}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		want = "a whole number"
		switch {
		case strings.HasSuffix(key, "_seconds"):
			want += " of seconds"
		case strings.HasSuffix(key, "_bytes") || strings.HasSuffix(key, "_memory") || strings.HasSuffix(key, "_store"):
			want += " of bytes"
		}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "a number"
	case t.Kind() == reflect.Bool:
		want = "true or false"
	case t.Kind() == reflect.String:
		want = "a text value"
	default:
		return nil
	}
	if n.Kind == yaml.ScalarNode && t.Kind() != reflect.Slice && t.Kind() != reflect.Struct && t.Kind() != reflect.Map {
		if n.Decode(reflect.New(t).Interface()) == nil {
			return nil
		}
		if t.Kind() != reflect.String && t.Kind() != reflect.Bool && n.Decode(new(float64)) == nil {
			got += " (out of range)" // a number the field cannot hold
		}
	}
	return &KeyError{Key: key, Line: n.Line, Reason: "want " + want + ", got " + got}
}

// lineOf is the line of the key at path ("log.level",
// "http_allowed_origins[2]", "agents[fraud-review].limits.max_connections":
// a list item by index or by its id) in root, or of the nearest enclosing
// key the file has (a fault of a default that another key makes wrong);
// 0 when root is nil or has none of it.
func lineOf(root *yaml.Node, path string) int {
	line, n := 0, root
	for seg := range strings.SplitSeq(path, ".") {
		name, rest, _ := strings.Cut(seg, "[")
		if n == nil || n.Kind != yaml.MappingNode {
			return line
		}
		k, v := mappingKey(n, name), mappingValue(n, name)
		if k == nil {
			return line
		}
		line, n = k.Line, v
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			rest = strings.TrimPrefix(after, "[")
			if n == nil || n.Kind != yaml.SequenceNode {
				return line
			}
			var item *yaml.Node
			if i, err := strconv.Atoi(idx); err == nil && i >= 0 && i < len(n.Content) {
				item = n.Content[i]
			} else {
				for _, it := range n.Content {
					if id := mappingValue(it, "id"); id != nil && id.Value == idx {
						item = it
					}
				}
			}
			if item == nil {
				return line
			}
			line, n = item.Line, item
		}
	}
	return line
}

// valueFaults are the faults of c's values that a2ad can name without
// starting anything, each a [*KeyError] without its line (LoadConfig
// finds it): log level and format, the tracing sample ratio, the token
// algorithms, the allowed origins, and the limits [Config.checkLimits]
// refuses.
func (c Config) valueFaults() []error {
	var faults []error
	if _, err := (LogConfig{Level: c.Log.Level}).NewLogger(io.Discard); err != nil {
		faults = append(faults, fromConfigError(err))
	}
	if _, err := (LogConfig{Format: c.Log.Format}).NewLogger(io.Discard); err != nil {
		faults = append(faults, fromConfigError(err))
	}
	if r := c.Tracing.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		faults = append(faults, &KeyError{Key: "tracing.sample_ratio", Reason: fmt.Sprintf("want a fraction from 0 (no trace) to 1 (every trace), got %v", *r)})
	}
	algs := []string{"ES256", "EdDSA", "RS256", "HS256"}
	for i, alg := range c.Auth.Algorithms {
		if !slices.Contains(algs, alg) {
			e := &KeyError{Key: "auth.algorithms[" + strconv.Itoa(i) + "]", Reason: fmt.Sprintf("want ES256, EdDSA or RS256 (HS256 only with hs256_secret_file), got %q", alg)}
			if s := suggest.Closest(alg, algs); s != "" {
				e.Reason += " (did you mean " + s + "?)"
			}
			faults = append(faults, e)
		}
	}
	for i, o := range c.HTTPAllowedOrigins {
		if _, err := normalOrigin(o); err != nil {
			faults = append(faults, &KeyError{Key: "http_allowed_origins[" + strconv.Itoa(i) + "]", Reason: fmt.Sprintf("want an origin scheme://host[:port] (RFC 6454), got %q: %v", o, err)})
		}
	}
	faults = append(faults, c.agentHTTPFaults()...)
	inherited := map[string]bool{} // agent_limits faults, which each agent without its own value repeats
	for _, e := range flatten(c.checkLimits()) {
		f := fromConfigError(e)
		if k, ok := f.(*KeyError); ok {
			if field, ok := strings.CutPrefix(k.Key, "agent_limits."); ok {
				inherited[field+" "+k.Reason] = true
			} else if id, field, ok := strings.Cut(strings.TrimPrefix(k.Key, "agents["), "].limits."); ok && strings.HasPrefix(k.Key, "agents[") &&
				inherited[field+" "+k.Reason] && !c.agentSets(id, field) {
				continue
			}
		}
		faults = append(faults, f)
	}
	return faults
}

// agentSets reports whether the file sets agents[id].limits.field itself
// (false for a Config built in code: its faults are all named).
func (c Config) agentSets(id, field string) bool {
	if c.file == nil {
		return true
	}
	if l := mappingValue(c.file, "agents"); l != nil && l.Kind == yaml.SequenceNode {
		for _, a := range l.Content {
			if v := mappingValue(a, "id"); v != nil && v.Value == id {
				return mappingKey(mappingValue(a, "limits"), field) != nil
			}
		}
	}
	return false
}

// flatten is the errors joined in err (errors.Join, at any depth).
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		if err == nil {
			return nil
		}
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}

// fromConfigError turns a "config: KEY VALUE: want …" error into a
// [*KeyError] for KEY, to which LoadConfig adds the line.
func fromConfigError(err error) error {
	msg, ok := strings.CutPrefix(err.Error(), "config: ")
	if !ok {
		return err
	}
	key, rest, _ := strings.Cut(msg, " ")
	key = strings.TrimSuffix(key, ":")
	return &KeyError{Key: key, Reason: rest, inline: true}
}

// EvidenceSchemaFaults are the evidence_schemas and output_schemas entries of c that name a
// host schema the schema directory (c.SchemasDir, else the built-in
// ones) does not hold, each a [*KeyError] with the line when c came from
// a file and the name most likely meant. Nil when the directory does not
// load: Start names that fault.
func EvidenceSchemaFaults(c Config) []error {
	reg, err := loadSchemas(c.SchemasDir)
	if err != nil {
		return nil
	}
	return evidenceSchemaFaults(c, reg)
}

func evidenceSchemaFaults(c Config, reg *artifact.Registry) []error {
	var faults []error
	names := reg.Names()
	for i, a := range c.Agents {
		skills := make([]string, 0, len(a.EvidenceSchemas))
		for skill := range a.EvidenceSchemas {
			skills = append(skills, skill)
		}
		slices.Sort(skills)
		for _, skill := range skills {
			name := a.EvidenceSchemas[skill]
			if _, err := reg.Get(name); err == nil {
				continue
			}
			key := fmt.Sprintf("agents[%d].evidence_schemas[%s]", i, skill)
			line := 0
			if c.file != nil {
				line = lineOf(c.file, key)
				if n := mappingValue(mappingValue(agentNode(c.file, i), "evidence_schemas"), skill); n != nil {
					line = n.Line
				}
			}
			e := &KeyError{Key: key, Line: line, Reason: fmt.Sprintf("no host schema named %q in %s", name, schemasDirName(c.SchemasDir))}
			if s := suggest.Closest(name, names); s != "" {
				e.Reason += fmt.Sprintf(" (did you mean %s?)", s)
			} else {
				e.Reason += "; it holds " + strings.Join(names, ", ")
			}
			faults = append(faults, e)
		}
		faults = append(faults, outputSchemaFaults(c, i, a, reg)...)
	}
	return faults
}

// outputSchemaFaults are the names in agents[i].output_schemas that reg
// does not hold, as [evidenceSchemaFaults] words them.
func outputSchemaFaults(c Config, i int, a AgentConfig, reg *artifact.Registry) []error {
	var faults []error
	names := reg.Names()
	for _, skill := range slices.Sorted(maps.Keys(a.OutputSchemas)) {
		for j, name := range a.OutputSchemas[skill] {
			if _, err := reg.Get(name); err == nil {
				continue
			}
			key := fmt.Sprintf("agents[%d].output_schemas[%s][%d]", i, skill, j)
			line := 0
			if c.file != nil {
				line = lineOf(c.file, key)
				if n := mappingValue(mappingValue(agentNode(c.file, i), "output_schemas"), skill); n != nil {
					line = n.Line
					if n.Kind == yaml.SequenceNode && j < len(n.Content) {
						line = n.Content[j].Line
					}
				}
			}
			e := &KeyError{Key: key, Line: line, Reason: fmt.Sprintf("no host schema named %q in %s", name, schemasDirName(c.SchemasDir))}
			if s := suggest.Closest(name, names); s != "" {
				e.Reason += fmt.Sprintf(" (did you mean %s?)", s)
			} else {
				e.Reason += "; it holds " + strings.Join(names, ", ")
			}
			faults = append(faults, e)
		}
		if len(a.OutputSchemas[skill]) == 0 {
			faults = append(faults, &KeyError{Key: fmt.Sprintf("agents[%d].output_schemas[%s]", i, skill),
				Reason: "lists no host schema: name at least one, or leave the skill out (then every host schema is allowed)"})
		}
	}
	return faults
}

func agentNode(root *yaml.Node, i int) *yaml.Node {
	if l := mappingValue(root, "agents"); l != nil && l.Kind == yaml.SequenceNode && i < len(l.Content) {
		return l.Content[i]
	}
	return nil
}

func schemasDirName(dir string) string {
	if dir == "" {
		return "the built-in schemas"
	}
	return "schemas_dir " + dir
}

// Add appends faults to e, keeping them in the file's order (by line).
func (e *FileError) Add(faults ...error) {
	e.Errs = append(e.Errs, faults...)
	slices.SortStableFunc(e.Errs, func(a, b error) int { return faultLine(a) - faultLine(b) })
}

func faultLine(err error) int {
	var k *KeyError
	if errors.As(err, &k) {
		return k.Line
	}
	return 0
}
