package untrusted

import (
	"bytes"
	"slices"
	"strings"
)

// respace returns s as the patterns read it, the same length with the same
// offsets:
//
//   - '_', '-', '/' and '+' become spaces wherever they stand, and so does
//     a '.' between two letters ("ignore.all.previous.instructions"). A '.'
//     with a space, a digit or the end of s beside it ends a sentence
//     ("C-12. Previous", "2026.11").
//   - A stretch of at least [minStretch] spaced-out letters, each standing
//     alone and separated from the next by those spaces ("i g n o r e   a l
//     l"), becomes its words: letters one space apart join, a wider gap
//     parts words. The words end where the stretch ends, spaces before
//     them, so that a suffix stays attached ("m o d e l's"). Shorter
//     stretches are prose ("a b test", "Plan A is ready").
//   - A role label in brackets at a line start ("[system]", "[SYSTEM]:",
//     "  [ assistant ]"; see roleLabels) becomes a tag ("<system>"), which
//     the RoleTag patterns match. Elsewhere in a line it is prose ("see
//     [system] notes").
//
// s is returned itself if nothing changes.
func respace(s string) string {
	var b []byte // a copy of s once something changes
	for i := 0; i < len(s); i++ {
		c := s[i]
		if lower[c] != 0 {
			// A whole word: only one that is a lone letter may begin a
			// stretch.
			j := i + 1
			for j < len(s) && lower[s[j]] != 0 {
				j++
			}
			if j == i+1 {
				if end, letters := stretch(s, i); letters >= minStretch {
					if b == nil {
						b = []byte(s)
					}
					collapse(b[i:end], s[i:end])
					j = end
				}
			}
			i = j - 1
			continue
		}
		if c != ' ' && isGap(s, i) {
			if b == nil {
				b = []byte(s)
			}
			b[i] = ' '
		} else if c == '[' {
			if j := roleLabel(s, i); j >= 0 {
				if b == nil {
					b = []byte(s)
				}
				b[i], b[j] = '<', '>'
				i = j
			}
		}
	}
	if b == nil {
		return s
	}
	return string(b)
}

// gaps are the characters respace makes spaces wherever they stand.
const gaps = "_-/+"

// isGap reports whether respace makes s[i] a space, or it is one.
func isGap(s string, i int) bool {
	switch s[i] {
	case ' ', '_', '-', '/', '+':
		return true
	case '.':
		return joins(s, i)
	}
	return false
}

// joins reports whether s[i] stands between two letters.
func joins(s string, i int) bool {
	return i > 0 && i+1 < len(s) && isLetter(s[i-1]) && isLetter(s[i+1])
}

// minStretch is the fewest letters a stretch of spaced-out letters holds.
const minStretch = 4

// stretch returns the end of the stretch of spaced-out letters that begins
// at s[i] and how many letters it holds: each a letter with no letter or
// digit beside it, each separated from the next by characters for which
// isGap holds. letters is 0 if s[i] is not such a letter.
func stretch(s string, i int) (end, letters int) {
	if !alone(s, i) {
		return i, 0
	}
	end, letters = i+1, 1
	for {
		k := end
		for k < len(s) && isGap(s, k) {
			k++
		}
		if k == end || k == len(s) || !alone(s, k) {
			return end, letters
		}
		end, letters = k+1, letters+1
	}
}

// alone reports whether s[i] is a letter with no letter or digit beside it.
func alone(s string, i int) bool {
	return isLetter(s[i]) && (i == 0 || lower[s[i-1]] == 0) && (i+1 == len(s) || lower[s[i+1]] == 0)
}

// collapse writes to dst the words of stretch, which dst is as long as:
// spaces, then the words one space apart.
func collapse(dst []byte, stretch string) {
	n, last := 0, -1
	for k := 0; k < len(stretch); k++ {
		if lower[stretch[k]] == 0 {
			continue
		}
		if last >= 0 && k-last > 2 {
			dst[n] = ' '
			n++
		}
		dst[n] = stretch[k]
		n++
		last = k
	}
	copy(dst[len(dst)-n:], dst[:n])
	for k := range len(dst) - n {
		dst[k] = ' '
	}
}

// stretchWords returns the bits of the need words among the words of
// stretch (see collapse).
func stretchWords(stretch string) set {
	var b set
	w := []byte(stretch)
	collapse(w, stretch)
	for word := range bytes.FieldsSeq(w) {
		if x, ok := lookup(string(word)); ok {
			b.add(x)
		}
	}
	return b
}

// roleLabels are the roles whose bracketed label at a line start respace
// makes a tag. "user" is not one: "[User] reported the parcel missing" is a
// transcript.
var roleLabels = []string{"system", "assistant", "developer"}

// roleLabel returns the offset of the ']' that closes a role label opened
// by s[i], a '[' at a line start (after spaces or tabs only); -1 if there
// is none. Spaces and tabs may stand around the role.
func roleLabel(s string, i int) int {
	for k := i - 1; k >= 0 && s[k] != '\n'; k-- {
		if s[k] != ' ' && s[k] != '\t' {
			return -1
		}
	}
	j := skipBlanks(s, i+1)
	w := j
	for j < len(s) && isLetter(s[j]) {
		j++
	}
	if !slices.ContainsFunc(roleLabels, func(r string) bool { return strings.EqualFold(r, s[w:j]) }) {
		return -1
	}
	if j = skipBlanks(s, j); j < len(s) && s[j] == ']' {
		return j
	}
	return -1
}

// skipBlanks returns the offset of the first byte from s[i] that is not a
// space or a tab.
func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}
