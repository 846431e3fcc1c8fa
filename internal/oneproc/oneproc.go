package oneproc

import "runtime"

// started is GOMAXPROCS as the runtime chose it at start.
var started = runtime.GOMAXPROCS(1)

var restored bool

// Restore gives the process the GOMAXPROCS the runtime chose at start (once;
// later calls do nothing). fromEnv says that the GOMAXPROCS environment
// variable chose it: then that value is kept as is; otherwise the runtime's
// default behaviour comes back (it follows CPU limit changes of a cgroup).
// Call it from one goroutine, before starting parallel work.
func Restore(fromEnv bool) {
	if restored {
		return
	}
	restored = true
	if fromEnv {
		runtime.GOMAXPROCS(started)
		return
	}
	runtime.SetDefaultGOMAXPROCS()
}

// Started is GOMAXPROCS as the runtime chose it at start.
func Started() int { return started }
