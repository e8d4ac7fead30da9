package artifact

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
)

// bundleMagic begins the archived form of a schema that references other
// schemas of its directory (see [Schema]). It is not JSON, so no schema
// file can be mistaken for a bundle, and an a2ad that predates bundles
// refuses one ("not valid JSON") instead of reading it as a schema that
// accepts anything.
const bundleMagic = "a2ad-schema-bundle/1\n"

// A schemaBundle is what follows bundleMagic: the files that make up a
// schema's meaning.
type schemaBundle struct {
	Schema string            `json:"schema"` // the file of the schema the bundle is for
	Files  map[string][]byte `json:"files"`  // file name → bytes: the schema and every schema it references
}

// bundle returns the canonical bytes of d's bundle with deps: encoding/json
// sorts the map's keys, so the same files always give the same bytes.
func bundle(d *parsed, deps []*parsed) ([]byte, error) {
	b := schemaBundle{Schema: d.file, Files: map[string][]byte{d.file: d.b}}
	for _, dep := range deps {
		b.Files[dep.file] = dep.b
	}
	j, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return append([]byte(bundleMagic), j...), nil
}

// readBundle decodes doc as a schema bundle; ok is false for anything else
// (a schema file). A doc that begins with bundleMagic but does not decode
// gives no files, which loads nothing.
func readBundle(doc []byte) (files []srcFile, schema string, ok bool) {
	rest, ok := bytes.CutPrefix(doc, []byte(bundleMagic))
	if !ok {
		return nil, "", false
	}
	var b schemaBundle
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if dec.Decode(&b) != nil || b.Files[b.Schema] == nil {
		return nil, "", true
	}
	for _, name := range slices.Sorted(maps.Keys(b.Files)) {
		files = append(files, srcFile{name: name, b: b.Files[name]})
	}
	return files, b.Schema, true
}

// fromArchive compiles an archived schema version (file is the name it had,
// doc the bytes its digest digests) under the load-time rules again.
func fromArchive(file string, doc []byte) (*Schema, error) {
	files, root, ok := readBundle(doc)
	if !ok {
		files, root = []srcFile{{name: file, b: doc}}, file
	}
	if len(files) == 0 {
		return nil, &LoadError{File: file, Reason: "archived schema bundle does not decode"}
	}
	r, err := loadFiles(files)
	if err != nil {
		return nil, err
	}
	return r.Get(strings.TrimSuffix(root, ".json"))
}

// embed returns d's document for an agent, which cannot read a2ad's schema
// directory: d with every schema in deps under its "definitions", each
// keeping its $id, so that d's $refs resolve within the one document as
// draft-07 specifies (draft-handrews-json-schema-01 §8.2.4). The members
// are re-encoded (sorted; numbers kept as written).
func embed(d *parsed, deps []*parsed) (json.RawMessage, error) {
	root, err := decodeUseNumber(d.b)
	if err != nil {
		return nil, err
	}
	obj := root.(map[string]any) // parse checked the top level is an object
	defs, _ := obj["definitions"].(map[string]any)
	if defs == nil {
		if _, present := obj["definitions"]; present {
			return nil, errors.New("definitions is not an object, so the schemas this one references cannot be put in it for the agent")
		}
		defs = map[string]any{}
		obj["definitions"] = defs
	}
	for _, dep := range deps {
		v, err := decodeUseNumber(dep.b)
		if err != nil {
			return nil, err
		}
		key := "a2ad:" + dep.name
		for _, taken := defs[key]; taken; _, taken = defs[key] {
			key += "_"
		}
		defs[key] = v
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimRight(out.Bytes(), "\n")), nil
}
