package main

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stagingGCPercent is the garbage collector's setting while this process
// stages (GOGC): a cold stage allocates a few MiB in a fraction of a second
// (the decoded table of contents, the lookup table: ~6 MiB for a numpy
// image, most of it live until the stage is published), so with Go's
// default (a collection whenever the heap doubles, from 4 MiB) it ran two to
// four collections that freed little. Each cost more than its marking: its
// stop-the-world waits for a decode worker to leave zstd's assembly loop,
// which cannot be preempted (up to a 4 MiB frame, ~3 ms, the other core
// idle meanwhile), and its sweep writes span sets into fresh pages (~300
// page faults a run; a fault costs ~13 us on the benchmark's VM). 800: the
// first collection comes at 36 MiB of heap, and the heap never grows past 9
// times what is live, so an image whose table of contents is far larger
// than usual still stages in bounded memory.
const stagingGCPercent = 800

// onStageMiss readies this process for staging, once no published stage
// was found (node.EnsureRequest.OnMiss): then, not before, since a warm
// exec must not pay for any of it. prev is the caller's own OnMiss.
func onStageMiss(prev func()) func() {
	return func() {
		if prev != nil {
			prev()
		}
		// A setting of the user's (GOGC) that already collects less
		// often is kept.
		if old := debug.SetGCPercent(stagingGCPercent); old < 0 || old > stagingGCPercent {
			debug.SetGCPercent(old)
		}
		go prefaultHeap()
	}
}

// prefaultHeap makes present, on huge pages where the kernel gives them,
// the pages of the Go heap that staging's allocations (the table of
// contents, the lookup table, the decoders: 6 MiB for a numpy image, 15
// for torch) fill next. Touched one by one, each small page is a page
// fault: ~16 us each on the benchmark's VM, whose hypervisor shadows the
// page tables (1,600 of them in a numpy stage, 3,000 in a torch one), ~1
// us on a bare node; populated at once ~1 us, but still ~8 us at its first
// touch on that VM; a huge page costs ~0.2 ms for 512 small pages' worth.
// Interleaved, numpy with /bin/true, load 3.4-3.7 (docs/benchmarks.md,
// round 5, issue 42): 14-25 ms less CPU a stage than without the
// prefault. It runs beside the lock and the read of the image's table of
// contents, which leave the other core idle on a quiet node. Best effort:
// a kernel without MADV_POPULATE_WRITE (before 5.14) or transparent huge
// pages, or a heap laid out otherwise, leaves the faults as they were;
// nothing but Go's own heap mapping is touched, and its pages stay
// zero-filled, as the runtime expects of memory fresh from the kernel.
func prefaultHeap() {
	// The heap maps more only when it needs it: one large object (it comes
	// straight from the page heap, at its lowest free pages, where the
	// heap grows next) makes it map prefaultBytes at once, untouched (fresh
	// memory is not cleared).
	big := make([]byte, prefaultBytes)
	lo := uintptr(unsafe.Pointer(&big[0]))
	end := mappingEnd(lo)
	runtime.KeepAlive(big)
	big = nil
	if end < lo+prefaultBytes {
		return
	}
	// Then it is freed at once (a collection now, while little is live and
	// the table of contents not yet decoded: a collection during that
	// decode made it assist the marking), which leaves its pages mapped
	// and free, and they are populated while the other goroutines allocate
	// from the lowest, just behind.
	runtime.GC()
	// Huge pages where the kernel gives them (THP "madvise" or "always"):
	// on the benchmark's VM the first touch of a small page costs ~8 us
	// even once populated (the hypervisor shadows the page tables).
	const huge = 2 << 20
	if hlo, hhi := (lo+huge-1)&^(huge-1), end&^(huge-1); hlo < hhi {
		unix.Syscall(unix.SYS_MADVISE, hlo, hhi-hlo, unix.MADV_HUGEPAGE)
	}
	populate(lo, end)
}

// prefaultBytes is how much of the heap prefaultHeap makes present (the
// process's memory grows by that at most: it execs the app or exits soon
// after staging).
const prefaultBytes = 12 << 20

// populate makes lo..hi present, populateStep at a time: the kernel holds
// the process's memory map (mmap_lock) for reading while it populates, and
// a thread that maps memory (the runtime growing the heap, a decode
// worker's buffers) waits for it; on a busy node the populating thread can
// lose its core with the lock held.
func populate(lo, hi uintptr) {
	page := uintptr(os.Getpagesize())
	lo = (lo + page - 1) &^ (page - 1)
	hi &^= page - 1
	for lo < hi {
		n := min(hi-lo, populateStep)
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, lo, n, unix.MADV_POPULATE_WRITE); e != 0 {
			return // an older kernel (EINVAL) or memory gone: the faults stay
		}
		lo += n
	}
}

const populateStep = 512 << 10

// mappingEnd returns the end of the private read-write mapping of this
// process that holds address at (/proc/self/maps), or 0.
func mappingEnd(at uintptr) uintptr {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(maps, []byte("\n")) {
		// "lo-hi rw-p offset dev inode [path]": anonymous private only.
		f := bytes.Fields(line)
		if len(f) != 5 || string(f[1]) != "rw-p" {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(string(lo), 16, 64)
		h, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 == nil && err2 == nil && uintptr(l) <= at && at < uintptr(h) {
			return uintptr(h)
		}
	}
	return 0
}
