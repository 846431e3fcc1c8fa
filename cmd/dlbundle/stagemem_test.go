package main

import (
	"runtime/debug"
	"testing"
	"unsafe"
)

// TestOnStageMissGCPercent: staging collects less often than Go's default,
// and a user's GOGC that collects even less (or never) is kept.
func TestOnStageMissGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range []struct{ user, want int }{{100, stagingGCPercent}, {50, stagingGCPercent}, {2000, 2000}, {-1, -1}} {
		debug.SetGCPercent(c.user)
		called := false
		onStageMiss(func() { called = true })()
		if got := debug.SetGCPercent(c.user); got != c.want {
			t.Errorf("GOGC %d: while staging %d, want %d", c.user, got, c.want)
		}
		if !called {
			t.Errorf("the caller's own OnMiss was not called")
		}
	}
}

// TestMappingEnd: the heap object's mapping is found and ends after it;
// an address no mapping holds gives 0.
func TestMappingEnd(t *testing.T) {
	b := make([]byte, 1<<20)
	at := uintptr(unsafe.Pointer(&b[0]))
	end := mappingEnd(at)
	if end < at+uintptr(len(b)) {
		t.Errorf("mappingEnd(%#x) = %#x: before the end of the 1 MiB object there", at, end)
	}
	if got := mappingEnd(4096); got != 0 {
		t.Errorf("mappingEnd(4096) = %#x, want 0", got)
	}
}

// TestPrefaultHeap: prefaulting leaves the heap usable (the pages it made
// present read as zero in what is allocated next).
func TestPrefaultHeap(t *testing.T) {
	prefaultHeap()
	b := make([]byte, 4<<20)
	for i := 0; i < len(b); i += 4096 {
		if b[i] != 0 {
			t.Fatalf("fresh allocation not zero at %d", i)
		}
		b[i] = 1
	}
}
