package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// convSource takes a path its pilot did not when CONV_EXTRA names a
// library: it dlopens it (by path) and reads CONV_DATA.
const convSource = `#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
	const char *lib = getenv("CONV_EXTRA"), *data = getenv("CONV_DATA");
	if (lib && *lib) {
		void *h = dlopen(lib, RTLD_NOW);
		if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
		int (*f)(void) = (int (*)(void))dlsym(h, "conv_extra");
		char line[64] = "";
		FILE *d = fopen(data, "r");
		if (!d || !fgets(line, sizeof line, d)) { perror(data); return 1; }
		fclose(d);
		printf("extra=%d data=%.4s ", f(), line);
	}
	printf("staged=%s\n", getenv("DLBUNDLE_STAGE") ? "yes" : "no");
	return 0;
}
`

// TestSpankAutoConverges: --dlbundle=auto folds what a served step missed
// into the auto image when the step ends, so the next step of the command
// loads it from the image. Step 1 (no image) traces the program; step 2 runs
// it taking a path the pilot did not (a library it dlopens, a file it reads,
// both on the shared file system) and misses them; when it ends the nodes
// fold their records into the image, once (the image is rewritten, not
// left half-written, and the later nodes find nothing left to add); step 3
// makes no call on the shared file system for that path.
func TestSpankAutoConverges(t *testing.T) {
	needSpank(t)
	dir := filepath.Join(shared.Shared, fmt.Sprintf("auto-conv-%d", time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog, lib, data := filepath.Join(dir, "conv"), filepath.Join(dir, "libconvextra.so"), filepath.Join(dir, "extra.dat")
	write(t, prog+".c", convSource)
	write(t, filepath.Join(dir, "extra.c"), "int conv_extra(void) { return 42; }\n")
	write(t, data, "DATA\n")
	compile(t, "gcc", "-O1", "-o", prog, prog+".c", "-ldl")
	compile(t, "gcc", "-O1", "-shared", "-fPIC", "-o", lib, filepath.Join(dir, "extra.c"))
	auto := filepath.Join(dir, "images")
	stage := "/dev/shm/t-spank-auto-conv"
	step := func(extra bool, want string, n int) string {
		t.Helper()
		cmd := shared.Command("srun", "-N3", fmt.Sprintf("--ntasks-per-node=%d", n/3), "--dlbundle=auto:"+auto, prog)
		cmd.Env = append(cmd.Env, "DLBUNDLE_STAGE_DIR="+stage)
		if extra {
			cmd.Env = append(cmd.Env, "CONV_EXTRA="+lib, "CONV_DATA="+data)
		}
		r := runCmd(t, cmd)
		if r.code != 0 || strings.Count(r.out, want) != n {
			t.Fatalf("srun --dlbundle=auto %s (extra path %v): exit %d; want %d lines with %q:\n%s\n%s", prog, extra, r.code, n, want, r.out, shared.Logs())
		}
		return r.out
	}
	// extraOps: operations on the shared file system on the path the
	// pilot did not take.
	extraOps := func() (n uint64, paths []string) {
		for _, pc := range sfs.TopPaths(1 << 20) {
			if strings.HasSuffix(pc.Path, "/libconvextra.so") || strings.HasSuffix(pc.Path, "/extra.dat") {
				n += pc.Count
				paths = append(paths, fmt.Sprintf("%s (%d)", pc.Path, pc.Count))
			}
		}
		return n, paths
	}
	imageNow := func() (string, unix.Stat_t) {
		t.Helper()
		var img string
		var st unix.Stat_t
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if imgs, _ := filepath.Glob(filepath.Join(auto, "auto-*.dlimg")); len(imgs) == 1 {
				img = imgs[0]
				break
			}
		}
		if img == "" || unix.Stat(img, &st) != nil {
			t.Fatalf("no image in %s\n%s", auto, shared.Logs())
		}
		return img, st
	}

	step(false, "staged=no", 3) // traced: the image is built
	img, built := imageNow()

	sfs.Reset()
	step(true, "extra=42 data=DATA staged=yes", 6)
	before, paths := extraOps()
	if before == 0 {
		t.Fatalf("the served step made no call on %s or %s: the test cannot tell anything", lib, data)
	}
	t.Logf("step 2 (the path the pilot did not take), 6 tasks: %d operations on the shared file system there: %v", before, paths)
	// The fold runs as the step ends on each node: wait for the new image,
	// then for the lock (a fold in progress holds it).
	var folded unix.Stat_t
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if unix.Stat(img, &folded) == nil && folded.Ino != built.Ino {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(strings.TrimSuffix(img, ".dlimg") + ".log")
			t.Fatalf("%s was not folded after the step that missed a path\n%s\n%s", img, log, shared.Logs())
		}
	}
	if fd, err := unix.Open(strings.TrimSuffix(img, ".dlimg")+".lock", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		t.Errorf("the folds' lock: %v", err)
	} else {
		unix.Flock(fd, unix.LOCK_EX)
		unix.Close(fd)
	}
	if unix.Stat(img, &folded); folded.Ino == built.Ino {
		t.Fatal("the image vanished")
	}
	// One fold: the first node's adds the misses, the others' find them
	// in the image already (every node ran the same tasks).
	if n := foldsLogged(img); n != 1 {
		t.Errorf("%d nodes folded their records into %s; want 1 (the others find nothing left to add)\n%s", n, img, shared.Logs())
	}
	left, _ := filepath.Glob(filepath.Join(auto, "*"))
	for _, f := range left {
		if strings.Contains(filepath.Base(f), ".tmp") || strings.HasPrefix(filepath.Base(f), ".") {
			t.Errorf("a fold left %s behind", f)
		}
	}

	sfs.Reset()
	step(true, "extra=42 data=DATA staged=yes", 6)
	if after, paths := extraOps(); after != 0 {
		t.Errorf("after the fold, step 3 still makes %d calls on the shared file system for the path step 2 missed: %v", after, paths)
	}
	// Nothing more to fold: the image is left as it is.
	time.Sleep(2 * time.Second)
	if n := foldsLogged(img); n != 1 {
		t.Errorf("after a step that missed nothing, %d folds into %s are logged; want still 1", n, img)
	}
	var again unix.Stat_t
	if unix.Stat(img, &again); again.Ino != folded.Ino {
		log, _ := os.ReadFile(strings.TrimSuffix(img, ".dlimg") + ".log")
		t.Errorf("a step that missed nothing rewrote the image\n%s", log)
	}
}

// foldsLogged counts the folds into img the nodes' slurmd logs report.
func foldsLogged(img string) int {
	logs, _ := filepath.Glob(filepath.Join(shared.Dir, "spool", "*.log"))
	n := 0
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "--dlbundle=auto fold: folded this node's misses") && strings.HasSuffix(line, " into "+img) {
				n++
			}
		}
	}
	return n
}
