package oneproc

import "runtime"

// started is GOMAXPROCS as the runtime chose it at start.
var started = runtime.GOMAXPROCS(1)

var restored bool

// Restore gives the process the GOMAXPROCS the runtime chose at start (once;
// later calls do nothing). It sets the number, as the GOMAXPROCS environment
// variable would: runtime.SetDefaultGOMAXPROCS would also bring back the
// runtime's following of cgroup CPU limit changes, but it reads the cgroup
// files again, which cost every verb ~1 ms, and dlbundle's verbs are
// short-lived. Call it from one goroutine, before starting parallel work.
func Restore() {
	if restored {
		return
	}
	restored = true
	runtime.GOMAXPROCS(started)
}

// Started is GOMAXPROCS as the runtime chose it at start.
func Started() int { return started }
