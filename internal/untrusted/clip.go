package untrusted

import "unicode/utf8"

// Clip cuts s to at most max bytes (max ≥ 3), at a rune boundary, marking
// the cut with "…"; s unchanged if it fits. For text from outside that is
// kept in a bounded place (a task record, an audit record).
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
