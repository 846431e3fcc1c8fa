package oneproc

import (
	"runtime"
	"testing"
)

// Until Restore the process runs on one P; Restore brings back the runtime's
// choice, once.
func TestRestore(t *testing.T) {
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS before Restore = %d, want 1", got)
	}
	if Started() < 1 {
		t.Fatalf("Started() = %d", Started())
	}
	Restore()
	if got := runtime.GOMAXPROCS(0); got != Started() {
		t.Fatalf("GOMAXPROCS after Restore = %d, want %d as at start", got, Started())
	}
	runtime.GOMAXPROCS(1)
	Restore() // a second call does nothing
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("a second Restore changed GOMAXPROCS to %d", got)
	}
	runtime.GOMAXPROCS(Started())
}
