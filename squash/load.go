package squash

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/dlbundle/dlbundle/trace"
)

// DefaultTrace is the trace `dlbundle trace` writes when not told otherwise.
const DefaultTrace = "dlbundle.trace"

// ErrNoTrace says that no trace was named and none is in the directory.
var ErrNoTrace = errors.New("no ./" + DefaultTrace + ": run `dlbundle trace -- CMD` first or name trace files")

// pilotName is the trace file name of the n-th pilot in a directory
// (n >= 1): dlbundle.trace, dlbundle.2.trace, dlbundle.3.trace ...
func pilotName(n int) string {
	if n == 1 {
		return DefaultTrace
	}
	return "dlbundle." + strconv.Itoa(n) + ".trace"
}

// NextTrace is the name `dlbundle trace` writes without -o: the first pilot
// name in dir whose file (for rank, its ".RANK" file) does not exist, so
// that a second pilot never replaces the first. rank is "" outside a
// launcher; the name returned has no ".RANK" (trace.OutputPath adds it).
func NextTrace(dir, rank string) string {
	for n := 1; ; n++ {
		name := pilotName(n)
		p := filepath.Join(dir, name)
		if rank != "" {
			p += "." + rank
		}
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			if dir == "." {
				return name
			}
			return filepath.Join(dir, name)
		}
	}
}

// DefaultTraces finds the traces of the pilot runs in dir: for each pilot
// (dlbundle.trace, dlbundle.2.trace, ... in that order) the file itself and
// the per-rank files <name>.<rank> of a multi-rank pilot, in rank order.
func DefaultTraces(dir string) ([]string, error) {
	type ranked struct {
		name        string
		pilot, rank int // rank -1: the pilot's own file
	}
	names, err := filepath.Glob(filepath.Join(dir, "dlbundle.*"))
	if err != nil {
		return nil, err
	}
	var rs []ranked
	for _, p := range names {
		base := filepath.Base(p)
		rest := strings.TrimPrefix(base, "dlbundle.")
		pilot := 1
		if num, after, ok := strings.Cut(rest, "."); ok && !strings.HasPrefix(rest, "trace") {
			n, err := strconv.Atoi(num)
			if err != nil || n < 2 {
				continue
			}
			pilot, rest = n, after
		}
		rank := -1
		switch {
		case rest == "trace":
		case strings.HasPrefix(rest, "trace."):
			n, err := strconv.Atoi(strings.TrimPrefix(rest, "trace."))
			if err != nil || n < 0 {
				continue
			}
			rank = n
		default:
			continue
		}
		rs = append(rs, ranked{p, pilot, rank})
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].pilot != rs[j].pilot {
			return rs[i].pilot < rs[j].pilot
		}
		return rs[i].rank < rs[j].rank
	})
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	if len(out) == 0 {
		return nil, ErrNoTrace
	}
	return out, nil
}

// Load reads whole traces; errors name the file and what is wrong with it.
func Load(paths []string) ([]*trace.Trace, error) {
	var out []*trace.Trace
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("trace %s does not exist: run `dlbundle trace -o %s -- CMD` first", p, p)
			}
			return nil, err
		}
		t, err := trace.Read(f, p)
		f.Close()
		if err != nil {
			if errors.Is(err, trace.ErrNotTrace) {
				return nil, fmt.Errorf("%w; give the files `dlbundle trace` wrote", err)
			}
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
