package untrusted

// respace returns s as the patterns read it, the same length with the same
// offsets: '_', '-', '/' and '+' become spaces wherever they stand, and so
// does a '.' between two letters ("ignore.all.previous.instructions"). A
// '.' with a space, a digit or the end of s beside it ends a sentence
// ("C-12. Previous", "2026.11"). s is returned itself if nothing changes.
func respace(s string) string {
	var b []byte // a copy of s once something changes
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' && isGap(s, i) {
			if b == nil {
				b = []byte(s)
			}
			b[i] = ' '
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
