// Package failpoint lets crash tests kill a2ad at an exact point of a
// delegation. A point is armed by naming it in the environment variable
// A2AD_FAILPOINT when the process starts; when the process reaches it, it
// kills itself with SIGKILL — no deferred function, flush or shutdown runs,
// exactly as with `kill -9`. Unarmed, a point costs one string comparison.
//
// Points (docs/durability.md explains why each is safe):
//
//	delegate-after-create         the task record is stored, the brief not yet sent
//	delegate-after-send           the agent answered SendMessage, the answer not applied
//	respond-after-resume          the answer is stored in the outbox, not yet sent
//	event-completed-before-apply  the agent's completion was received, not yet applied
//	event-completed-after-apply   the completion was applied, not yet acknowledged
//
// A point fires on its first hit, so a test arms one point per process.
package failpoint

import (
	"fmt"
	"os"
)

// Env is the environment variable that arms a point.
const Env = "A2AD_FAILPOINT"

var armed = os.Getenv(Env)

// Hit kills the process if name is the armed point.
func Hit(name string) {
	if armed == "" || armed != name {
		return
	}
	fmt.Fprintf(os.Stderr, "a2ad: failpoint %s reached: killing the process\n", name)
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		_ = p.Kill()
	}
	select {} // SIGKILL is not instantaneous; never return into the caller
}

// Armed reports whether any point is armed, so callers can skip work done
// only to decide whether a point is reached.
func Armed() bool { return armed != "" }
