package loader

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// interpreter is the node's ld.so (the PT_INTERP of every dynamically linked
// program of this architecture).
var interpreter = map[string]string{
	"amd64": "/lib64/ld-linux-x86-64.so.2",
	"arm64": "/lib/ld-linux-aarch64.so.1",
}[runtime.GOARCH]

// writeSearchRules writes what this node's ld.so accepts, after extraction:
// the table's flag for the ELF objects of this node's class and machine
// (markNodeELF), then STAGE/search from the probe; a probe that fails leaves
// no file (the shim falls back) and says why. The shim objects must be in
// place (the probe searches for one of them).
func writeSearchRules(ctx context.Context, dir string) error {
	if err := markNodeELF(dir); err != nil {
		return err
	}
	var rules []byte
	var err error
	// A freshly written executable can be briefly busy (ETXTBSY: a child
	// forked meanwhile by another goroutine still holds it open): retry.
	for try := 0; try < 3; try++ {
		if rules, err = probeSearchRules(ctx, filepath.Join(dir, stageShimDir)); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle: ld.so search rules unknown (%v); ld.so will probe search directories itself\n", err)
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, stageSearch), rules, 0o444); err != nil {
		return fmt.Errorf("materialize: write search rules: %w", err)
	}
	return nil
}

// probeSearchRules asks the node's ld.so, which it runs twice and which
// touches nothing outside the stage: "ld.so --help" names the default
// directories; "ld.so --list STAGE/shim/audit.so" with LD_PRELOAD=audit.so,
// LD_LIBRARY_PATH=STAGE/shim and LD_DEBUG=libs prints every subdirectory it
// probes in STAGE/shim, in order, before it finds audit.so there. (audit.so
// has no DT_NEEDED: --list loads nothing else and runs nothing.)
func probeSearchRules(ctx context.Context, shimDir string) ([]byte, error) {
	if interpreter == "" {
		return nil, fmt.Errorf("no ld.so known for %s", runtime.GOARCH)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The image's copy when it holds ld.so (the same file as the node's, or
	// the bundled libc would not work either): the probe then makes no
	// call on the bundled original.
	ldso := interpreter
	if st, err := os.Stat(filepath.Join(filepath.Dir(shimDir), stageRootDir, interpreter)); err == nil && st.Mode().IsRegular() {
		ldso = filepath.Join(filepath.Dir(shimDir), stageRootDir, interpreter)
	}
	help, err := exec.CommandContext(ctx, ldso, "--help").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --help: %w", ldso, err)
	}
	cmd := exec.CommandContext(ctx, ldso, "--list", filepath.Join(shimDir, shimAuditName))
	cmd.Env = []string{"LD_DEBUG=libs", "LD_LIBRARY_PATH=" + shimDir, "LD_PRELOAD=" + shimAuditName}
	// The app's own settings that change ld.so's subdirectory list.
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GLIBC_TUNABLES=") || strings.HasPrefix(kv, "LD_HWCAP_MASK=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s --list: %w", ldso, err)
	}
	return parseSearchRules(string(help), stderr.String(), shimDir)
}

// parseSearchRules turns ld.so's --help text and its LD_DEBUG=libs output
// of the probe (a search of LD_LIBRARY_PATH=probeDir) into the STAGE/search
// text.
func parseSearchRules(help, debug, probeDir string) ([]byte, error) {
	var llp []string
	for _, line := range strings.Split(debug, "\n") {
		_, rest, ok := strings.Cut(line, "search path=")
		if !ok {
			continue
		}
		list, source, _ := strings.Cut(rest, "\t")
		if strings.Contains(source, "(LD_LIBRARY_PATH)") {
			llp = strings.Split(list, ":")
			break
		}
	}
	if len(llp) == 0 {
		return nil, fmt.Errorf("ld.so printed no search path (LD_DEBUG=libs unsupported?)")
	}
	var b strings.Builder
	b.WriteString("dlbundle-search 1\n")
	for i, d := range llp {
		if d != probeDir && !strings.HasPrefix(d, probeDir+"/") {
			return nil, fmt.Errorf("unexpected probe candidate %q", d)
		}
		c := strings.TrimPrefix(strings.TrimPrefix(d, probeDir), "/")
		if c != "" {
			c += "/"
		}
		if (c == "") != (i == len(llp)-1) || strings.ContainsAny(c, "\n") {
			return nil, fmt.Errorf("ld.so's subdirectory list %q does not end with the directory itself", llp)
		}
		fmt.Fprintf(&b, "cap %s\n", c)
	}
	// "  /lib/x86_64-linux-gnu (system search path)"
	n := 0
	for _, line := range strings.Split(help, "\n") {
		d, ok := strings.CutSuffix(strings.TrimSpace(line), " (system search path)")
		if !ok {
			continue
		}
		if !strings.HasPrefix(d, "/") || strings.ContainsAny(d, "\n") {
			return nil, fmt.Errorf("system directory %q is not absolute", d)
		}
		fmt.Fprintf(&b, "dir %s\n", d)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("ld.so --help named no system search path (glibc < 2.33?)")
	}
	if b.Len() >= 4000 {
		return nil, fmt.Errorf("search rules longer than the shim's buffer")
	}
	return []byte(b.String()), nil
}
