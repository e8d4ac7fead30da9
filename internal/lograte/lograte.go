// Package lograte bounds repeated log lines: a [Gate] lets through one
// line per key every interval and counts the others, so that a flood of
// like events (an agent's refused events, retried deliveries to an agent
// that is away) costs a line every few seconds, not one per event. The
// line let through carries the count of those held back.
package lograte

import (
	"sync"
	"time"
)

// Gate lets one line per key through every Every (default 10 s). It holds
// at most MaxKeys keys (default 1024); past that it forgets them all. The
// zero value is ready; a Gate is safe for concurrent use.
type Gate struct {
	Every   time.Duration
	MaxKeys int

	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	last time.Time
	held int
}

// Allow reports whether a line for key may be written at now, and how many
// were held back since the last one let through.
func (g *Gate) Allow(key string, now time.Time) (ok bool, held int) {
	every, most := g.Every, g.MaxKeys
	if every <= 0 {
		every = 10 * time.Second
	}
	if most <= 0 {
		most = 1024
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil || len(g.m) >= most {
		g.m = map[string]*entry{}
	}
	e := g.m[key]
	if e == nil {
		g.m[key] = &entry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < every {
		e.held++
		return false, 0
	}
	held, e.held, e.last = e.held, 0, now
	return true, held
}
