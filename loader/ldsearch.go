package loader

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The shim answers a library search of ld.so as a whole (audit.c,
// la_objsearch at LA_SER_ORIG) and so must know the two things of ld.so's
// search that depend on the node, not on the image: the subdirectories it
// probes below every search directory (glibc-hwcaps/x86-64-v{4,3,2} as far as
// this CPU supports them, legacy tls/ and platform ones until glibc 2.36), in
// ld.so's order, and the default (system) directories. Both are compiled into
// or computed by the node's ld.so; the stage records what ld.so itself prints
// for a search that cannot succeed, once per node, in STAGE/search:
//
//	dlbundle-search 1
//	cap glibc-hwcaps/x86-64-v4/      (one line per subdirectory, in order;
//	...                               the last is "cap " = the directory itself)
//	dir /lib/x86_64-linux-gnu        (one line per default directory, in order)
//
// No file: the shim answers per candidate as before (correct, but ld.so then
// stats the search directories itself).

// probeDir is a directory that exists on no system: the probe's search fails
// in it without touching anything but the root directory.
const probeDir = "/dlbundle-ldso-probe"

// writeSearchRules runs the probe and writes STAGE/search; a probe that fails
// leaves no file (the shim falls back) and says why.
func writeSearchRules(ctx context.Context, dir string) error {
	rules, err := probeSearchRules(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle: ld.so search rules unknown (%v); ld.so will probe search directories itself\n", err)
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, stageSearch), rules, 0o444); err != nil {
		return fmt.Errorf("materialize: write search rules: %w", err)
	}
	return nil
}

// probeSearchRules asks the node's ld.so (through /bin/true, a dynamically
// linked system program) to preload a library that does not exist, with
// LD_DEBUG=libs: it prints the LD_LIBRARY_PATH search (probeDir with every
// subdirectory it tries) and then the system search path.
func probeSearchRules(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/true")
	cmd.Env = []string{"LD_DEBUG=libs", "LD_LIBRARY_PATH=" + probeDir, "LD_PRELOAD=libdlbundle-ldso-probe.so"}
	// The app's own settings that change ld.so's subdirectory list.
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GLIBC_TUNABLES=") || strings.HasPrefix(kv, "LD_HWCAP_MASK=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("probe /bin/true: %w", err)
	}
	return parseSearchRules(stderr.String())
}

// parseSearchRules turns ld.so's LD_DEBUG=libs output of the probe into the
// STAGE/search text.
func parseSearchRules(debug string) ([]byte, error) {
	var llp, sys []string
	for _, line := range strings.Split(debug, "\n") {
		_, rest, ok := strings.Cut(line, "search path=")
		if !ok {
			continue
		}
		list, source, _ := strings.Cut(rest, "\t")
		switch {
		case strings.Contains(source, "(LD_LIBRARY_PATH)") && llp == nil:
			llp = strings.Split(list, ":")
		case strings.Contains(source, "(system search path)") && sys == nil:
			sys = strings.Split(list, ":")
		}
	}
	if len(llp) == 0 || len(sys) == 0 {
		return nil, fmt.Errorf("ld.so printed no search path (LD_DEBUG=libs unsupported?)")
	}
	var caps []string
	for _, d := range llp {
		if d != probeDir && !strings.HasPrefix(d, probeDir+"/") {
			return nil, fmt.Errorf("unexpected probe candidate %q", d)
		}
		c := strings.TrimPrefix(strings.TrimPrefix(d, probeDir), "/")
		if c != "" {
			c += "/"
		}
		caps = append(caps, c)
	}
	if caps[len(caps)-1] != "" || len(sys)%len(caps) != 0 {
		return nil, fmt.Errorf("ld.so's subdirectory list %q does not end with the directory itself", caps)
	}
	var b strings.Builder
	b.WriteString("dlbundle-search 1\n")
	for _, c := range caps {
		fmt.Fprintf(&b, "cap %s\n", c)
	}
	for i := 0; i < len(sys); i += len(caps) {
		d := sys[i+len(caps)-1]
		for j, c := range caps {
			want := strings.TrimSuffix(d+"/"+c, "/")
			if d == "/" {
				want = strings.TrimSuffix("/"+c, "/")
			}
			if sys[i+j] != want {
				return nil, fmt.Errorf("system search path entry %q, expected %q", sys[i+j], want)
			}
		}
		if !strings.HasPrefix(d, "/") || strings.ContainsAny(d, "\n") {
			return nil, fmt.Errorf("system directory %q is not absolute", d)
		}
		fmt.Fprintf(&b, "dir %s\n", d)
	}
	return []byte(b.String()), nil
}
