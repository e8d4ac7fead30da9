// Package a2ad holds the built-in reference fixtures that ship inside the
// binaries, so that `a2ad demo` and `fraud-review-agent` run from any
// directory: the reference agent's A2A 1.0 card and the host schemas under
// testdata/. Tests read the same files from disk.
package a2ad

import (
	"embed"
	"io/fs"
)

//go:embed testdata/cards/fraud-review.json testdata/schemas/*.json
var fixtures embed.FS

// FraudReviewCard returns the reference fraud-review agent's card
// (testdata/cards/fraud-review.json).
func FraudReviewCard() []byte {
	b, err := fixtures.ReadFile("testdata/cards/fraud-review.json")
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return b
}

// HostSchemas returns the built-in host schemas directory (testdata/schemas).
func HostSchemas() fs.FS {
	sub, err := fs.Sub(fixtures, "testdata/schemas")
	if err != nil {
		panic(err)
	}
	return sub
}
