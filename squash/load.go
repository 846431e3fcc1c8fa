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

// DefaultTraces finds the traces of the pilot run in dir: dlbundle.trace and
// the per-rank files dlbundle.trace.<rank> of a multi-rank pilot, in rank order.
func DefaultTraces(dir string) ([]string, error) {
	var out []string
	if _, err := os.Stat(filepath.Join(dir, DefaultTrace)); err == nil {
		out = append(out, filepath.Join(dir, DefaultTrace))
	}
	ranks, err := filepath.Glob(filepath.Join(dir, DefaultTrace+".*"))
	if err != nil {
		return nil, err
	}
	type ranked struct {
		name string
		rank int
	}
	var rs []ranked
	for _, r := range ranks {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(r), DefaultTrace+"."))
		if err == nil && n >= 0 {
			rs = append(rs, ranked{r, n})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].rank < rs[j].rank })
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
