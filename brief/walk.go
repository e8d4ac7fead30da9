package brief

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// walk is the single pass over untrusted JSON: it checks the syntax
// (RFC 8259), counts nesting depth and members, and scans every member name
// and string for secrets. It decodes no value — numbers keep their exact
// text — and allocates only to decode escaped strings and on failure.
//
// A syntax error or an exceeded limit stops the walk; a secret is noted and
// the walk goes on, so that a document is first judged as JSON. The path to
// a fault lives in the recursion's frames, each adding its step as the fault
// unwinds; a noted secret is located by a second walk that stops at it.
type walk struct {
	doc      []byte
	pos      int
	maxDepth int // levels; the outermost value is level 1
	maxItems int // object members plus array elements, over the document
	items    int
	scratch  []byte // decoded text of the last escaped string
	found    *fault // the first secret, its steps not yet known
	foundAt  int    // its offset in doc: the value, or the member name's quote
	stopAt   int    // 1 + the offset at which the locating walk stops; 0 to scan
}

// step is one step of a path: an object member, named by its raw (still
// escaped) bytes in doc, or an array element.
type step struct {
	start, end int // the member name between its quotes; end < 0 for an element
	index      int // the element's index
}

type faultKind uint8

const (
	faultSyntax faultKind = iota
	faultDepth
	faultItems
	faultSecret
)

// fault is why a walk stopped: the first problem in document order.
type fault struct {
	what    faultKind
	pointer string // faultDepth: the container too deep; faultSecret: see [Secret]
	kind    SecretKind
	inName  bool
	steps   []step // the path to pointer, innermost first, while unwinding
}

func (f *fault) secret() Secret { return Secret{Pointer: f.pointer, Kind: f.kind, InName: f.inName} }

// at records that f happened under st; only located faults keep a path.
func (f *fault) at(st step) *fault {
	if f.what == faultDepth || f.what == faultSecret {
		f.steps = append(f.steps, st)
	}
	return f
}

// run walks the whole document and returns nil if it is one valid JSON value
// within the limits and holds no secret.
func (w *walk) run() *fault {
	f := w.value(1, labelNone)
	if f == nil {
		w.blank()
		if w.pos != len(w.doc) {
			f = &fault{what: faultSyntax}
		}
	}
	if f == nil && w.found != nil {
		locate := walk{doc: w.doc, maxDepth: w.maxDepth, maxItems: w.maxItems, found: w.found, stopAt: w.foundAt + 1}
		f = locate.value(1, labelNone)
	}
	if f != nil && (f.what == faultSecret || w.found == nil || !w.found.inName) {
		// A path may pass under a member name noted as a secret; a limit
		// fault after one is then reported without its path.
		f.pointer = w.pointer(f.steps)
	}
	return f
}

// note records the secret of kind k at offset unless one came before, and
// lets the walk go on.
func (w *walk) note(k SecretKind, inName bool, offset int) *fault {
	if w.found == nil {
		w.found, w.foundAt = &fault{what: faultSecret, kind: k, inName: inName}, offset
	}
	return nil
}

func (w *walk) blank() {
	for w.pos < len(w.doc) {
		switch w.doc[w.pos] {
		case ' ', '\t', '\n', '\r':
			w.pos++
		default:
			return
		}
	}
}

// value reads one value at nesting level depth. lbl is what the member name
// says the value is, for credentials recognisable only by their label.
func (w *walk) value(depth int, lbl label) *fault {
	w.blank()
	if w.pos >= len(w.doc) {
		return &fault{what: faultSyntax}
	}
	if w.stopAt == w.pos+1 && !w.found.inName {
		return w.found
	}
	start := w.pos
	switch c := w.doc[w.pos]; {
	case c == '{' || c == '[':
		if depth > w.maxDepth {
			return &fault{what: faultDepth}
		}
		if c == '{' {
			return w.object(depth)
		}
		return w.array(depth)
	case c == '"':
		s, ok := w.str()
		if !ok {
			return &fault{what: faultSyntax}
		}
		if w.stopAt != 0 { // locating: nothing before the secret needs a scan
			return nil
		}
		k := scanText(s)
		if k == "" {
			k = lbl.check(s)
		}
		if k != "" {
			return w.note(k, false, start)
		}
		return nil
	case c == '-' || ('0' <= c && c <= '9'):
		if !w.number() {
			return &fault{what: faultSyntax}
		}
		if w.stopAt == 0 && integerCard(w.doc[start:w.pos]) {
			return w.note(SecretCardNumber, false, start)
		}
		return nil
	case c == 't':
		return w.literal("true")
	case c == 'f':
		return w.literal("false")
	case c == 'n':
		return w.literal("null")
	}
	return &fault{what: faultSyntax}
}

func (w *walk) literal(lit string) *fault {
	if !at(w.doc, w.pos, lit) {
		return &fault{what: faultSyntax}
	}
	w.pos += len(lit)
	return nil
}

func (w *walk) count() *fault {
	w.items++
	if w.items > w.maxItems {
		return &fault{what: faultItems}
	}
	return nil
}

// object reads an object; w.pos is at its "{".
func (w *walk) object(depth int) *fault {
	w.pos++
	w.blank()
	if w.pos < len(w.doc) && w.doc[w.pos] == '}' {
		w.pos++
		return nil
	}
	for {
		w.blank()
		if w.pos >= len(w.doc) || w.doc[w.pos] != '"' {
			return &fault{what: faultSyntax}
		}
		if w.stopAt == w.pos+1 && w.found.inName {
			return w.found
		}
		quote := w.pos
		name, ok := w.str()
		if !ok {
			return &fault{what: faultSyntax}
		}
		start, end := quote+1, w.pos-1 // the name between its quotes
		// The name is scanned before the walk goes under it, so a pointer
		// only ever carries names that passed.
		if w.stopAt == 0 {
			if k := scanText(name); k != "" {
				w.note(k, true, quote)
			}
		}
		if f := w.count(); f != nil {
			return f
		}
		lbl := labelOf(name)
		w.blank()
		if w.pos >= len(w.doc) || w.doc[w.pos] != ':' {
			return &fault{what: faultSyntax}
		}
		w.pos++
		if f := w.value(depth+1, lbl); f != nil {
			return f.at(step{start: start, end: end})
		}
		w.blank()
		if w.pos >= len(w.doc) {
			return &fault{what: faultSyntax}
		}
		switch w.doc[w.pos] {
		case ',':
			w.pos++
		case '}':
			w.pos++
			return nil
		default:
			return &fault{what: faultSyntax}
		}
	}
}

// array reads an array; w.pos is at its "[".
func (w *walk) array(depth int) *fault {
	w.pos++
	w.blank()
	if w.pos < len(w.doc) && w.doc[w.pos] == ']' {
		w.pos++
		return nil
	}
	for i := 0; ; i++ {
		if f := w.count(); f != nil {
			return f
		}
		if f := w.value(depth+1, labelNone); f != nil {
			return f.at(step{end: -1, index: i})
		}
		w.blank()
		if w.pos >= len(w.doc) {
			return &fault{what: faultSyntax}
		}
		switch w.doc[w.pos] {
		case ',':
			w.pos++
		case ']':
			w.pos++
			return nil
		default:
			return &fault{what: faultSyntax}
		}
	}
}

// str reads the string at w.pos (its opening quote) and returns its text:
// a slice of doc when it has no escapes, else w.scratch, valid until the next
// call. Raw control characters and bad escapes are a syntax error.
func (w *walk) str() ([]byte, bool) {
	start := w.pos + 1
	escaped := false
	for i := start; i < len(w.doc); i++ {
		if !stringSpecial[w.doc[i]] {
			continue
		}
		switch c := w.doc[i]; {
		case c == '"':
			w.pos = i + 1
			if !escaped {
				return w.doc[start:i], true
			}
			var ok bool
			w.scratch, ok = unescape(w.scratch[:0], w.doc[start:i])
			return w.scratch, ok
		case c == '\\':
			escaped = true
			i++ // the escaped byte cannot close the string
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// stringSpecial marks the bytes that end, escape or invalidate a JSON string.
var stringSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// unescape appends the decoded text of the JSON string content raw to dst.
// Lone surrogates become U+FFFD, as in encoding/json.
func unescape(dst, raw []byte) ([]byte, bool) {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(raw) {
			return dst, false
		}
		switch raw[i] {
		case '"', '\\', '/':
			dst = append(dst, raw[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw[i+1:])
			if !ok {
				return dst, false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				// A high surrogate and a low one escaped next make one rune.
				if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if lo, ok := hex4(raw[i+3:]); ok {
						if d := utf16.DecodeRune(r, lo); d != utf8.RuneError {
							dst = utf8.AppendRune(dst, d)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, false
		}
	}
	return dst, true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number reads a JSON number: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
func (w *walk) number() bool {
	d := w.doc
	i := w.pos
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = run(d, i, clDigit)
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		j := run(d, i+1, clDigit)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := run(d, i, clDigit)
		if j == i {
			return false
		}
		i = j
	}
	w.pos = i
	return true
}

// pointer is the RFC 6901 JSON pointer of the path given innermost step
// first, relative to the document ("" is the whole document).
func (w *walk) pointer(steps []step) string {
	var b strings.Builder
	var name []byte
	for i := len(steps) - 1; i >= 0; i-- {
		seg := steps[i]
		b.WriteByte('/')
		if seg.end < 0 {
			b.WriteString(strconv.Itoa(seg.index))
			continue
		}
		name, _ = unescape(name[:0], w.doc[seg.start:seg.end])
		for _, c := range name {
			switch c {
			case '~':
				b.WriteString("~0")
			case '/':
				b.WriteString("~1")
			default:
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}

// label is what an object member's name says its string value is.
type label uint8

const (
	labelNone          label = iota
	labelAuthorization       // Authorization, Proxy-Authorization
	labelAWSSecret           // aws_secret_access_key, SecretAccessKey …
)

// labelOf classifies a member name, ignoring case and anything that is not a
// letter or digit.
func labelOf(name []byte) label {
	if len(name) < len("authorization") || len(name) > 64 {
		return labelNone
	}
	var buf [64]byte
	n := 0
	for _, c := range name {
		switch cl := class[c]; {
		case cl&clUpper != 0:
			buf[n] = c + 'a' - 'A'
			n++
		case cl&(clLower|clDigit) != 0:
			buf[n] = c
			n++
		}
	}
	norm := string(buf[:n])
	switch {
	case norm == "authorization" || norm == "proxyauthorization":
		return labelAuthorization
	case strings.HasSuffix(norm, "secretaccesskey"):
		return labelAWSSecret
	}
	return labelNone
}

// check returns the kind of credential s is, given the label of its member.
func (l label) check(s []byte) SecretKind {
	switch l {
	case labelAuthorization:
		if authValueAt(s, 0) {
			return SecretAuthorization
		}
	case labelAWSSecret:
		if len(s) == 40 && awsSecretValue(s) {
			return SecretAWSSecretAccessKey
		}
	}
	return ""
}
