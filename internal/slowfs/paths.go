package slowfs

import (
	"sort"
	"sync"
)

// Recording which paths the metadata operations were about answers "who
// still touches the shared file system?" (e.g. under dlbundle exec, whose
// goal is zero operations per rank). Off by default: it takes a lock per op.

// PathCount is how many metadata operations concerned one path (relative to
// the mount, with a leading /).
type PathCount struct {
	Path  string `json:"path"`
	Count uint64 `json:"count"`
}

type pathCounts struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (p *pathCounts) add(path string) {
	p.mu.Lock()
	if p.m == nil {
		p.m = map[string]uint64{}
	}
	p.m[path]++
	p.mu.Unlock()
}

func (p *pathCounts) reset() {
	p.mu.Lock()
	p.m = nil
	p.mu.Unlock()
}

// RecordPaths switches per-path counting on or off.
func (f *FS) RecordPaths(on bool) { f.recordPaths.Store(on) }

// TopPaths returns the n paths with the most metadata operations since the
// last Reset, most first (ties by path).
func (f *FS) TopPaths(n int) []PathCount {
	f.paths.mu.Lock()
	out := make([]PathCount, 0, len(f.paths.m))
	for p, c := range f.paths.m {
		out = append(out, PathCount{p, c})
	}
	f.paths.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Path < out[j].Path
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
