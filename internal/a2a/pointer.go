package a2a

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// A DecodeError is a payload this package refused, with the RFC 6901 JSON
// pointer of the member at fault. It wraps [ErrDecode].
//
// Pointer tokens are only the member names of A2A 1.0 (as this package
// spells them) and array indexes, never a name the sender chose: for an
// unknown member the pointer is the object holding it. "" is the whole
// payload.
type DecodeError struct {
	Pointer string // e.g. "/statusUpdate/status/state"
	Reason  string // in a2ad's words, quoting nothing of the payload
}

// Error returns "a2a: malformed payload: REASON (at POINTER)", or without
// the parenthesis when Pointer is "".
func (e *DecodeError) Error() string {
	if e.Pointer == "" {
		return ErrDecode.Error() + ": " + e.Reason
	}
	return ErrDecode.Error() + ": " + e.Reason + " (at " + e.Pointer + ")"
}

// Unwrap returns ErrDecode.
func (e *DecodeError) Unwrap() error { return ErrDecode }

func decodeErr(ptr, reason string) error { return &DecodeError{Pointer: ptr, Reason: reason} }

// located turns a strictUnmarshal error of b (decoded as a t) into a
// *DecodeError at the member at fault.
func located(err error, b []byte, t reflect.Type, at string) error {
	var de *DecodeError
	if errors.As(err, &de) {
		return err
	}
	reason, _ := strings.CutPrefix(err.Error(), ErrDecode.Error()+": ")
	return decodeErr(at+locate(b, t), reason)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// locate returns the pointer, relative to b, of the first member of b (in
// member name order) that does not strictly decode into its field of t.
func locate(b []byte, t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return ""
	}
	switch t.Kind() {
	case reflect.Struct:
		var members map[string]json.RawMessage
		if json.Unmarshal(b, &members) != nil {
			return ""
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(mapKeys(members)) {
			name, ft, ok := fields.lookup(k)
			if !ok {
				return "" // an unknown member: the object is at fault
			}
			if strictUnmarshal(members[k], reflect.New(ft).Interface()) != nil {
				return "/" + name + locate(members[k], ft)
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return ""
		}
		var elems []json.RawMessage
		if json.Unmarshal(b, &elems) != nil {
			return ""
		}
		for i, e := range elems {
			if strictUnmarshal(e, reflect.New(t.Elem()).Interface()) != nil {
				return "/" + strconv.Itoa(i) + locate(e, t.Elem())
			}
		}
	}
	return ""
}

func mapKeys(m map[string]json.RawMessage) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

type fieldSet map[string]reflect.Type

// lookup finds member k's field as encoding/json does (exact name, else
// case-insensitively) and returns the name as this package spells it.
func (fs fieldSet) lookup(k string) (string, reflect.Type, bool) {
	if ft, ok := fs[k]; ok {
		return k, ft, true
	}
	for name, ft := range fs {
		if strings.EqualFold(name, k) {
			return name, ft, true
		}
	}
	return "", nil, false
}

var fieldCache sync.Map // reflect.Type → fieldSet

func jsonFields(t reflect.Type) fieldSet {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(fieldSet)
	}
	fs := fieldSet{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs[name] = f.Type
	}
	fieldCache.Store(t, fs)
	return fs
}
