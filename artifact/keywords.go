package artifact

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"

	"github.com/xeipuuv/gojsonschema"
)

// ignoredBesideRef are the draft-07 keywords that assert or apply
// subschemas. Beside a "$ref" the draft-07 validator ignores every one of
// them (draft-handrews-json-schema-01 §8.3: "All other properties in a
// "$ref" object MUST be ignored"), so a schema that puts one there says
// more than it checks: it is refused at load. Annotations ("title",
// "description", "default", …), "$id", "$schema", "$comment" and the
// places for subschemas ("definitions", "$defs") may stand beside "$ref".
var ignoredBesideRef = map[string]bool{
	"type": true, "enum": true, "const": true, "format": true,
	"multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true, "exclusiveMinimum": true,
	"maxLength": true, "minLength": true, "pattern": true,
	"items": true, "additionalItems": true, "maxItems": true, "minItems": true, "uniqueItems": true, "contains": true,
	"maxProperties": true, "minProperties": true, "required": true, "properties": true, "patternProperties": true,
	"additionalProperties": true, "dependencies": true, "propertyNames": true,
	"if": true, "then": true, "else": true, "allOf": true, "anyOf": true, "oneOf": true, "not": true,
}

// CheckedFormats are the values of "format" that gojsonschema v1.2.0
// checks (its FormatCheckers). It passes every value under any other
// name, so a schema naming another format is refused at load.
var CheckedFormats = []string{
	"date", "time", "date-time", "hostname", "email", "idn-email", "ipv4", "ipv6",
	"uri", "uri-reference", "iri", "iri-reference", "uri-template", "uuid", "regex",
	"json-pointer", "relative-json-pointer",
}

// jsonTypes are the type names of draft-07 (draft-handrews-json-schema-
// validation-01 §6.1.1).
var jsonTypes = map[string]bool{"null": true, "boolean": true, "object": true, "array": true, "number": true, "string": true, "integer": true}

// checkPattern checks a "pattern" value: a string that Go's regexp
// compiles, as gojsonschema compiles it.
func (c *checker) checkPattern(v *onode, p string) {
	if v.kind != kindString {
		c.fail(p, "pattern must be a string")
		return
	}
	if _, err := regexp.Compile(v.str); err != nil {
		c.fail(p, "pattern is not a regular expression Go's regexp accepts (RE2 syntax: no look-around, no back-references): "+regexpReason(err))
	}
}

// checkFormat checks a "format" value: a string naming a format
// gojsonschema checks ([CheckedFormats]).
func (c *checker) checkFormat(v *onode, p string) {
	if v.kind != kindString {
		c.fail(p, "format must be a string")
		return
	}
	if !gojsonschema.FormatCheckers.Has(v.str) {
		c.fail(p, fmt.Sprintf("format %q refused: the validator does not check it and would pass every value; the formats it checks are %s",
			clip(v.str), strings.Join(CheckedFormats, ", ")))
	}
}

// checkType checks a "type" value: one draft-07 type name, or an array of
// distinct ones.
func (c *checker) checkType(v *onode, p string) {
	want := "type must be one of null, boolean, object, array, number, string, integer, or an array of them"
	switch v.kind {
	case kindString:
		if !jsonTypes[v.str] {
			c.fail(p, fmt.Sprintf("type %q unknown: %s", clip(v.str), want))
		}
	case kindArray:
		seen := map[string]bool{}
		for i, e := range v.elems {
			ep := fmt.Sprintf("%s/%d", p, i)
			switch {
			case e.kind != kindString || !jsonTypes[e.str]:
				c.fail(ep, want)
			case seen[e.str]:
				c.fail(ep, fmt.Sprintf("type %q named twice", e.str))
			}
			seen[e.str] = true
		}
	default:
		c.fail(p, want)
	}
}

// checkRequired checks a "required" value: an array of distinct strings.
func (c *checker) checkRequired(v *onode, p string) {
	if v.kind != kindArray {
		c.fail(p, "required must be an array of property names")
		return
	}
	seen := map[string]bool{}
	for i, e := range v.elems {
		ep := fmt.Sprintf("%s/%d", p, i)
		switch {
		case e.kind != kindString:
			c.fail(ep, "required must be an array of property names (strings)")
		case seen[e.str]:
			c.fail(ep, fmt.Sprintf("required names %q twice", clip(e.str)))
		}
		seen[e.str] = true
	}
}

// regexpReason is what Go's regexp says is wrong, in its own short words
// ("invalid or unsupported Perl syntax: `(?<`").
func regexpReason(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return string(se.Code) + ": " + clip(se.Expr)
	}
	return "does not compile"
}

// countKeywords take a non-negative integer (draft-handrews-json-schema-
// validation-01 §6.2–6.5), which gojsonschema reads as an int64: "2.0"
// and "1e2" do not compile.
var countKeywords = map[string]bool{"minLength": true, "maxLength": true, "minItems": true, "maxItems": true, "minProperties": true, "maxProperties": true}

// boundKeywords take a number; multipleOf one greater than 0
// (draft-handrews-json-schema-validation-01 §6.2).
var boundKeywords = map[string]bool{"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true}

func (c *checker) checkCount(v *onode, p, key string) {
	n, err := strconv.ParseInt(v.str, 10, 64)
	if v.kind != kindScalar || err != nil || n < 0 {
		c.fail(p, key+" must be a non-negative integer written without a fraction or exponent")
	}
}

func (c *checker) checkBound(v *onode, p, key string) {
	r, ok := new(big.Rat).SetString(v.str)
	switch {
	case v.kind != kindScalar || !ok:
		c.fail(p, key+" must be a number")
	case key == "multipleOf" && r.Sign() <= 0:
		c.fail(p, "multipleOf must be greater than 0")
	}
}
