// Package suggest finds the name an operator most likely meant when a
// configuration key, a scope or a flag value is not one a2ad knows: the
// "did you mean http_addr?" of an error message.
package suggest

// Closest returns the candidate nearest to word by edit distance
// (Levenshtein: insertions, deletions and substitutions of one byte each,
// '-' and '_' counted as equal, case ignored), or "" when none is within
// a third of the longer name (at least 2 edits): a suggestion that far off
// would mislead more than help. Ties go to the earlier candidate.
func Closest(word string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := distance(fold(word), fold(c))
		limit := max(2, max(len(word), len(c))/3)
		if d > limit || d == 0 && word == c {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

func fold(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case 'A' <= c && c <= 'Z':
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// distance is the Levenshtein distance of a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
