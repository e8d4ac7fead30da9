// Package untrusted finds injection phrasing in agent text: wording that
// addresses a model rather than informs it ("ignore all previous
// instructions", "<|im_start|>system"). a2ad scans every agent-supplied
// string that can reach a host and flags what it finds; the flag is a
// backstop for the host, not a boundary, and does not change what is
// delivered.
//
// [Scan] checks one string; [Walk] checks every string value and object key
// of a decoded JSON document and reports findings as RFC 6901 pointers that
// name only array indexes and the property names the caller declares.
// Neither ever returns the matched text.
package untrusted

import (
	"html"
	"math/bits"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Scan reports whether s contains injection phrasing and, if so, its kind
// (see [Kinds]): that of the first pattern, in a fixed order, to match in
// the first sentence of s that holds a match. Matching ignores case and sees
// through the usual disguises: zero-width and other invisible format
// characters, accents and other combining marks, Unicode spaces,
// compatibility characters (full-width forms, mathematical, circled and
// Roman-numeral letters, ligatures), common Cyrillic and Greek look-alikes,
// angle-bracket look-alikes, HTML character references, '_', '-', '/',
// '+' or '.' between words ("ignore.all.previous.instructions": a '.'
// between two letters joins words; beside a space, a digit or the end it
// ends a sentence), words spelt out in spaced letters ("i g n o r e", four
// letters or more), and a bracketed role label at a line start
// ("[system]", read as "<system>"). See prepare and respace.
//
// Scan is safe for concurrent use. It reads s once to find the patterns'
// key words, sentence by sentence, and runs a pattern's regular expression
// only on a sentence that holds all the words it needs, anchored where a
// match could begin; so ordinary prose costs a few nanoseconds a byte and,
// when it is ASCII, no allocation.
func Scan(s string) (kind string, found bool) {
	if !plain(s) {
		s = prepare(s)
	}
	sc := scanner{s: s}
	return sc.scan()
}

// prepare returns s as the scanner reads it: folded if it is not ASCII
// (see [fold]), then, if it holds an HTML character reference that ends in
// ';' ("&lt;system&gt;", "&#60;"), with references decoded, one level, and
// folded again if that gave non-ASCII characters.
func prepare(s string) string {
	if !isASCII(s) {
		s = fold(s)
	}
	if hasReference(s) {
		if s = html.UnescapeString(s); !isASCII(s) {
			s = fold(s)
		}
	}
	return s
}

// hasReference reports whether s holds '&', a name or number and ';'. An
// ampersand in prose ("AT&T", "Q&A") is not one, so such prose is not
// copied.
func hasReference(s string) bool {
	for {
		i := strings.IndexByte(s, '&')
		if i < 0 {
			return false
		}
		s = s[i+1:]
		n := 0
		for n < len(s) && n < maxReference && (lower[s[n]] != 0 || s[n] == '#') {
			n++
		}
		if n > 0 && n < len(s) && s[n] == ';' {
			return true
		}
	}
}

// maxReference bounds the name or number of an HTML character reference
// ("CounterClockwiseContourIntegral", 31 letters).
const maxReference = 32

// scanner holds one string being scanned and, once a pattern has to run on
// a part that [respace] changes, the respaced string.
type scanner struct {
	s, spaced string
	// dirty is set once the scan has read a character that respace may
	// change; haveSpaced once spaced holds respace(s).
	dirty, haveSpaced bool
}

// scan reads s word by word. No pattern can match across '.', '!' or '?'
// except by ending on one, so each sentence, its end mark included, is
// checked on its own with the items it holds. A '.' that joins two letters
// ("ignore.all") is a space (see [respace]), not the end of a sentence.
func (sc *scanner) scan() (string, bool) {
	s := sc.s
	var (
		present set
		start   int // of the current sentence
		// lones counts the one-letter words of the sentence: a stretch
		// of spaced-out letters (see respace) holds minStretch or more.
		lones int
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if lower[c] != 0 {
			// A word: a run of letters, or of digits ("instructions0" is
			// two: patterns need no boundary after their last word).
			j := i + 1
			if isDigit(c) {
				for j < len(s) && isDigit(s[j]) {
					j++
				}
			} else {
				for j < len(s) && isLetter(s[j]) {
					j++
				}
				if j == i+1 {
					lones++
				}
			}
			if b, ok := lookup(s[i:j]); ok {
				present.add(b)
			}
			i = j - 1
			continue
		}
		switch c {
		case '.', '!', '?':
			if c == '.' && joins(s, i) {
				sc.dirty = true
				break
			}
			if lones >= minStretch {
				present.add(sc.stretches(start, i))
			}
			lones = 0
			if !present.empty() {
				if kind, ok := sc.sentence(present, start, i+1); ok {
					return kind, true
				}
				present = set{}
			}
			start = i + 1
		default:
			if k := charKind[c]; k != 0 {
				present.add(itemBits[c])
				sc.dirty = sc.dirty || k&respaced != 0
			}
		}
	}
	if lones >= minStretch {
		present.add(sc.stretches(start, len(s)))
	}
	if present.empty() {
		return "", false
	}
	return sc.sentence(present, start, len(s))
}

// stretches returns the bits of the need words of the stretches of
// spaced-out letters that respace collapses in s[start:end], a sentence,
// and notes whether there is one.
func (sc *scanner) stretches(start, end int) set {
	var b set
	for i := start; i < end; i++ {
		if !alone(sc.s, i) {
			continue
		}
		if e, letters := stretch(sc.s, i); letters >= minStretch {
			b.add(stretchWords(sc.s[i:e]))
			sc.dirty, i = true, e-1
		}
	}
	return b
}

// lookup returns the bits of need word w, in any case; false if it is
// none.
func lookup(w string) (set, bool) {
	if len(w) > maxWord || !maybe[len(w)][class[w[0]]][class[w[len(w)-1]]] {
		return set{}, false
	}
	return lookupWord(w)
}

func lookupWord(w string) (set, bool) {
	var lw [maxWord]byte
	for i := range len(w) {
		lw[i] = lower[w[i]]
	}
	b, ok := wordBits[string(lw[:len(w)])]
	return b, ok
}

// sentence tries, in order, every pattern whose needs present meets on the
// sentence s[start:end], anchored at each of its lead items (every match
// begins with one).
func (sc *scanner) sentence(present set, start, end int) (string, bool) {
	// The patterns a lead item of the sentence may begin, as bits of all.
	var candidates uint64
	for w, x := range present {
		for x &= leadItems[w]; x != 0; x &= x - 1 {
			candidates |= byLead[w*64+bits.TrailingZeros64(x)]
		}
	}
	var (
		buf   [16]leadAt
		leads []leadAt // nil until a pattern is to run
		text  string   // s, or respaced if the scan has read what respace changes
	)
	for ; candidates != 0; candidates &= candidates - 1 {
		p := &all[bits.TrailingZeros64(candidates)]
		if !p.metBy(present) {
			continue
		}
		if leads == nil {
			if sc.dirty && !sc.haveSpaced {
				sc.spaced, sc.haveSpaced = respace(sc.s), true
			}
			text = sc.s
			if sc.haveSpaced {
				text = sc.spaced
			}
			leads = findLeads(buf[:0], text, start, end)
		}
		for _, l := range leads {
			if l.bits.meets(p.groups[0]) && p.anchored.MatchString(text[l.at:end]) {
				return p.kind, true
			}
		}
	}
	return "", false
}

// leadAt is an item that may begin a match, and its offset.
type leadAt struct {
	bits set
	at   int
}

// findLeads appends to dst the lead items of s[start:end].
func findLeads(dst []leadAt, s string, start, end int) []leadAt {
	for i := start; i < end; {
		if lower[s[i]] == 0 {
			if b := charBits[s[i]]; b.meets(leadItems) {
				dst = append(dst, leadAt{b, i})
			}
			i++
			continue
		}
		j := i
		for j < end && lower[s[j]] != 0 && isDigit(s[j]) == isDigit(s[i]) {
			j++
		}
		// A word split off a digit run ("0SYSTEM") does not begin at a word
		// boundary, where every pattern's lead word begins.
		if b, _ := lookup(s[i:j]); b.meets(leadItems) && (i == 0 || lower[s[i-1]] == 0) {
			dst = append(dst, leadAt{b, i})
		}
		i = j
	}
	return dst
}

// set is a set of need items, one bit each (items share a bit beyond 256,
// which only makes the filter looser: TestNeedItemsHaveTheirOwnBits keeps
// them apart).
type set [4]uint64

func (a *set) add(b set)  { a[0] |= b[0]; a[1] |= b[1]; a[2] |= b[2]; a[3] |= b[3] }
func (a set) empty() bool { return a[0]|a[1]|a[2]|a[3] == 0 }
func (a set) meets(b set) bool {
	return a[0]&b[0]|a[1]&b[1]|a[2]&b[2]|a[3]&b[3] != 0
}

// compiled is a pattern with its need groups as sets, and its expression
// anchored at the start of the text.
type compiled struct {
	pattern
	groups   []set
	anchored *regexp.Regexp
}

func (p *compiled) metBy(present set) bool {
	for _, g := range p.groups {
		if !g.meets(present) {
			return false
		}
	}
	return true
}

// maxWord bounds the length of a need word.
const maxWord = 16

// Bits of charKind.
const (
	item     = 1 << iota // a need item
	respaced             // a character respace changes
)

var (
	all      []compiled // core then more
	wordBits = map[string]set{}
	charBits [256]set // for the characters need may list
	// itemBits are the items the scan counts for a character: those of
	// charBits, and for '[' that of '<' too, as respace may make a '[' at
	// a line start one.
	itemBits [256]set
	// charKind marks those characters (item) and the ones respace
	// changes wherever they stand (respaced), so the scan skips the rest
	// with one load.
	charKind [256]uint8
	// leadItems holds every item of a first need group; byLead[b] the
	// patterns (bit i for all[i]) whose first group holds the item of bit b.
	leadItems set
	byLead    [len(set{}) * 64]uint64
	// maybe[n][f][l] is true if some need word has length n, first
	// character class f and last class l (see class).
	maybe [maxWord + 1][37][37]bool
	// class numbers a..z and A..Z 1..26 and 0..9 27..36; any other byte
	// is 0.
	class = func() (t [256]byte) {
		for c := 'a'; c <= 'z'; c++ {
			t[c], t[c-'a'+'A'] = byte(c-'a'+1), byte(c-'a'+1)
		}
		for c := '0'; c <= '9'; c++ {
			t[c] = byte(c - '0' + 27)
		}
		return t
	}()
)

func init() {
	next := 0
	bit := func() set {
		var b set
		b[next/64%len(b)] = 1 << (next % 64)
		next++
		return b
	}
	patterns := slices.Concat(core, more)
	if len(patterns) > 64 {
		panic("untrusted: more than 64 patterns: widen byLead")
	}
	for _, p := range patterns {
		src, ok := strings.CutPrefix(p.re.String(), "(?i)")
		if !ok {
			panic("untrusted: pattern without (?i): " + p.re.String())
		}
		c := compiled{pattern: p, anchored: regexp.MustCompile(`(?i)^(?:` + src + `)`)}
		for g := range strings.SplitSeq(p.need, ";") {
			var gs set
			for _, w := range strings.Fields(g) {
				if len(w) == 1 && strings.Contains("<|[#", w) {
					if charKind[w[0]]&item == 0 {
						charBits[w[0]] = bit()
						charKind[w[0]] |= item
					}
					gs.add(charBits[w[0]])
					continue
				}
				if len(w) > maxWord || strings.IndexFunc(w, func(r rune) bool { return lower[byte(r)] != byte(r) || r >= utf8.RuneSelf }) >= 0 {
					panic("untrusted: bad need word " + w)
				}
				if _, ok := wordBits[w]; !ok {
					wordBits[w] = bit()
				}
				maybe[len(w)][class[w[0]]][class[w[len(w)-1]]] = true
				gs.add(wordBits[w])
			}
			if gs.empty() {
				panic("untrusted: empty need group in " + p.re.String())
			}
			if len(c.groups) == 0 {
				leadItems.add(gs)
				for w, x := range gs {
					for ; x != 0; x &= x - 1 {
						byLead[w*64+bits.TrailingZeros64(x)] |= 1 << len(all)
					}
				}
			}
			c.groups = append(c.groups, gs)
		}
		all = append(all, c)
	}
	for i := range len(gaps) {
		charKind[gaps[i]] |= respaced
	}
	itemBits = charBits
	itemBits['['].add(charBits['<'])
	charKind['['] |= respaced
}

// lower maps ASCII letters to lowercase and digits to themselves; every
// other byte to 0, a word separator.
var lower = func() (t [256]byte) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = byte(c), byte(c)
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c)
	}
	return t
}()

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// plain reports whether s is ASCII without '&', so that prepare would
// return it as it is. It reads eight bytes at a time: this pass is a tenth
// of the cost of scanning prose.
func plain(s string) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
		amps  = ones * '&'
	)
	for ; len(s) >= 8; s = s[8:] {
		v := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		x := v ^ amps // a zero byte where v has '&'
		if v&highs != 0 || (x-ones)&^x&highs != 0 {
			return false
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf || s[i] == '&' {
			return false
		}
	}
	return true
}

// fold rewrites s so that disguised letters, spaces and angle brackets
// become ASCII. Each character is first replaced by its Unicode
// compatibility decomposition (NFKD: full-width forms, mathematical
// alphanumerics, circled letters, Roman numerals, ligatures, superscripts
// and accented letters become plain letters and combining marks). Then
// format characters (zero-width space and joiners, bidi controls, soft
// hyphen, tag characters) and combining marks are dropped; Unicode spaces
// become ' '; typographic apostrophes become ASCII ones; the Cyrillic and
// Greek letters and the angle brackets of [lookalikes] become the ASCII
// character they show; a letter whose case-folding orbit holds an ASCII
// letter becomes that letter. Invalid UTF-8 becomes U+FFFD.
//
// Decomposition rather than NFKC: composing again would turn "e\u0301"
// into "é", which no longer loses its mark.
func fold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			b.WriteByte(s[i])
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if d := norm.NFKD.PropertiesString(s[i:]).Decomposition(); d != nil && r != utf8.RuneError {
			for _, r := range string(d) {
				writeFolded(&b, r)
			}
		} else {
			writeFolded(&b, r)
		}
		i += size
	}
	return b.String()
}

func writeFolded(b *strings.Builder, r rune) {
	if r < utf8.RuneSelf {
		b.WriteByte(byte(r))
	} else if m := foldRune(r); m >= 0 {
		b.WriteRune(m)
	}
}

// foldRune returns what fold writes for r, which is not ASCII and has no
// compatibility decomposition; -1 drops it.
func foldRune(r rune) rune {
	switch {
	case unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r):
		return -1
	case unicode.IsSpace(r) || unicode.Is(unicode.Zs, r):
		return ' '
	case r == '\u2018' || r == '\u2019' || r == '\u02bc':
		return '\''
	}
	if m, ok := lookalikes[r]; ok {
		return m
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < utf8.RuneSelf {
			return f
		}
	}
	return r
}

// lookalikes maps Cyrillic and Greek letters that render like Latin ones,
// and angle brackets and quotation marks that render like '<' and '>'.
var lookalikes = map[rune]rune{
	'а': 'a', 'в': 'b', 'е': 'e', 'к': 'k', 'м': 'm', 'н': 'h', 'о': 'o', 'р': 'p', 'с': 'c', 'т': 't',
	'у': 'y', 'х': 'x', 'і': 'i', 'ї': 'i', 'ј': 'j', 'ѕ': 's', 'ԁ': 'd', 'ԛ': 'q', 'ԝ': 'w', 'ɡ': 'g',
	'А': 'A', 'В': 'B', 'Е': 'E', 'К': 'K', 'М': 'M', 'Н': 'H', 'О': 'O', 'Р': 'P', 'С': 'C', 'Т': 'T',
	'У': 'Y', 'Х': 'X', 'І': 'I', 'Ј': 'J', 'Ѕ': 'S',
	'α': 'a', 'ε': 'e', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'χ': 'x',
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Ζ': 'Z', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M', 'Ν': 'N', 'Ο': 'O',
	'Ρ': 'P', 'Τ': 'T', 'Υ': 'Y', 'Χ': 'X',
	'ı': 'i', 'ȷ': 'j',
	'‹': '<', '›': '>', '«': '<', '»': '>', '〈': '<', '〉': '>', '《': '<', '》': '>', '⟨': '<', '⟩': '>',
	'❬': '<', '❭': '>', '❮': '<', '❯': '>', '˂': '<', '˃': '>', 'ᐸ': '<', 'ᐳ': '>',
}
