package loader

// Directory listings under dlbundle exec and what a stage
// creates, on an image of `python3 -c 'import numpy'` built with
// the real CLI from Debian's numpy tree: every way C and Python read a
// bundled directory gives, line by line, what it gives natively (order,
// types, inode numbers, errors); the stage holds about what the image does.

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

const numpyTree = "/usr/lib/python3/dist-packages/numpy"

// numpyStage traces and builds the numpy image in dir and stages it (cold)
// under stageDir with a first exec; it returns the image's path and the
// exec arguments up to "--".
func numpyStage(t *testing.T, dir, stageDir string) (img string, execArgs []string) {
	t.Helper()
	needTools(t, "gcc", "strace")
	if _, err := os.Stat(numpyTree); err != nil {
		t.Fatalf("Debian's python3-numpy is needed (make deps): %v", err)
	}
	bin := clitest.CLI(t)
	env := clitest.CleanEnv(dir)
	runIn(t, dir, env, bin, "trace", "-q", "-o", "numpy.trace", "--", "/usr/bin/python3", "-c", "import numpy")
	runIn(t, dir, env, bin, "build", "-o", "numpy.dlimg", "numpy.trace")
	img = filepath.Join(dir, "numpy.dlimg")
	execArgs = []string{bin, "exec", "--stage-dir", stageDir, img, "--"}
	runIn(t, dir, env, execArgs[0], append(execArgs[1:], "/bin/true")...)
	return img, execArgs
}

// bundledDirs are the image's directories below prefix, by path.
func bundledDirs(t *testing.T, img, prefix string) []string {
	t.Helper()
	im, err := image.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	var dirs []string
	for _, e := range im.Entries() {
		if e.Type == image.TypeDir && (e.Path == prefix || strings.HasPrefix(e.Path, prefix+"/")) {
			dirs = append(dirs, e.Path)
		}
	}
	sort.Strings(dirs)
	return dirs
}

// tmpfsDir is a fresh directory on /dev/shm (tmpfs, exec's default stage
// dir), removed after the test.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "dlbundle-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// On a tmpfs stage (exec's default), where a stage's own directory order is
// newest first; the original tree is on ext4 (hash order).
func TestNumpyListingsAsNative(t *testing.T) {
	dir := t.TempDir()
	img, execArgs := numpyStage(t, dir, filepath.Join(tmpfsDir(t), "stage"))
	dirs := bundledDirs(t, img, numpyTree)
	if len(dirs) < 10 {
		t.Fatalf("the numpy image bundles %d directories below %s: the pilot did not import numpy", len(dirs), numpyTree)
	}
	// Also: a listed directory the image does not bundle (passed through),
	// and the standard library's json package (bundled).
	probeDirs := append(slices.Clone(dirs), numpyTree+"/tests", "/usr/lib/python3.11/json")
	probe := filepath.Join(dir, "listprobe")
	if out, err := exec.Command("gcc", "-O1", "-Wall", "-o", probe, "testdata/listprobe.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc listprobe.c: %v\n%s", err, out)
	}
	pyProbe, err := filepath.Abs("testdata/listprobe.py")
	if err != nil {
		t.Fatal(err)
	}
	env := clitest.CleanEnv(dir)
	many := append(clitest.CleanEnv(dir), "LISTPROBE_MANY=1") // also 130 streams at once
	for name, c := range map[string][]string{
		"listprobe.c":  append([]string{probe}, probeDirs...),
		"listprobe.py": append([]string{"/usr/bin/python3", pyProbe}, probeDirs...),
	} {
		native := runIn(t, dir, many, c[0], c[1:]...)
		under := runIn(t, dir, many, execArgs[0], append(execArgs[1:], c...)...)
		if !strings.Contains(native, "== "+dirs[1]) || strings.Count(native, "\n") < 100 {
			t.Fatalf("%s: the native run printed too little to compare:\n%.2000s", name, native)
		}
		if name == "listprobe.c" && !strings.Contains(native, "streams 130 opened=130 same=130\n") {
			t.Errorf("natively the 130 streams of %s did not list the same: %s", dirs[0], native[strings.LastIndex(native, "streams"):])
		}
		diffLines(t, name, native, under)
	}

	// The bundled directories were served from the table (with at most
	// 128 streams at once: no LISTPROBE_MANY here): under exec no
	// system call listed them or opened them as opendir does (O_DIRECTORY).
	// Opens of a directory without O_DIRECTORY (the probe's openat of each
	// name, "." and ".." included) pass through to the original, as for
	// every path (docs/loader.md), and fchdir enters the original by its
	// path.
	log := filepath.Join(dir, "exec.strace")
	runIn(t, dir, env, "strace", append([]string{"-f", "-qq", "-y", "-s", "4096", "-e", "trace=%file,getdents64", "-o", log},
		append(execArgs, append([]string{probe}, dirs...)...)...)...)
	ops := straceOps(t, log, dir)
	for _, d := range dirs {
		for _, l := range ops[d] {
			if strings.Contains(l, "getdents64(") || strings.Contains(l, "O_DIRECTORY") {
				t.Errorf("under exec a system call used the bundled directory %s itself:\n  %s", d, l)
				break
			}
		}
	}
}

// A stage creates about what the image holds (at most 1.25x the
// objects `zstd -dc | cpio -idm` creates from it), not a placeholder per
// listed name and a mirror of every listed directory.
func TestNumpyStageObjects(t *testing.T) {
	dir := t.TempDir()
	img, _ := numpyStage(t, dir, filepath.Join(dir, "stage"))
	cp := filepath.Join(dir, "cpio")
	if err := os.Mkdir(cp, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `zstd -dc "$1" | cpio -idm --no-absolute-filenames --quiet`, "sh", img)
	cmd.Dir = cp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zstd -dc | cpio -idm: %v\n%s", err, out)
	}
	stages, err := filepath.Glob(filepath.Join(dir, "stage", "sha256-*"))
	if err != nil || len(stages) != 1 {
		t.Fatalf("stage dirs %v, %v", stages, err)
	}
	objects := func(root string) (n int) {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && p != root {
				n++
			}
			return nil
		})
		return n
	}
	stage, cpio := objects(stages[0]), objects(cp)
	t.Logf("objects: stage %d (tree %d), zstd|cpio %d", stage, objects(filepath.Join(stages[0], stagefmt.RootDir)), cpio)
	if cpio < 300 {
		t.Fatalf("zstd|cpio made %d objects: the image is not the numpy image", cpio)
	}
	if float64(stage) > 1.25*float64(cpio) {
		t.Errorf("the stage holds %d objects, more than 1.25x the %d zstd|cpio makes of the same image", stage, cpio)
	}
}

const dlopenAll = `#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '@') { /* a data file to read */
			FILE *f = fopen(argv[i] + 1, "r");
			printf("%s %s\n", argv[i], f ? "read" : "not found");
			if (f) fclose(f);
			continue;
		}
		void *h = dlopen(argv[i], RTLD_NOW);
		printf("%s %s\n", argv[i], h ? "loaded" : "not found");
	}
	return 0;
}
`

// Why the stage mirrors the listed subdirectories that ld.so probes
// (mirrorProbedDirs). The pilot read a data file in more/ and searched
// lib/ for liba.so; the job runs with more/ first in LD_LIBRARY_PATH. more/
// is bundled (its listing names tls/, which the pilot's ld.so never probed:
// listed, not bundled). ld.so searches more/tls/ per candidate (the table
// cannot decide it), the candidate fails, and ld.so stats the stage's
// more/tls to learn whether to search it again. Without the mirror it skips
// more/tls/ for every later name, and liblate.so there, first dlopen'ed
// after the pilot and not in the image, is not found, where natively it is.
func TestMirroredProbeDirKeepsLaterSearches(t *testing.T) {
	needTools(t, "gcc")
	dir := t.TempDir()
	lib, more := filepath.Join(dir, "tree", "lib"), filepath.Join(dir, "tree", "more")
	for _, d := range []string{lib, filepath.Join(more, "tls")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(dir, "src.c")
	gcc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", append([]string{"-O1", "-Wl,--no-as-needed"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	for name, content := range map[string]string{src: "int f(void) { return 1; }\n", filepath.Join(more, "conf"): "x\n"} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gcc("-shared", "-fPIC", "-o", filepath.Join(lib, "liba.so"), src)
	gcc("-shared", "-fPIC", "-o", filepath.Join(more, "tls", "liblate.so"), src)
	if err := os.WriteFile(src, []byte(dlopenAll), 0o644); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "tree", "app")
	gcc("-o", app, src, "-ldl")
	bin := clitest.CLI(t)
	runIn(t, dir, append(clitest.CleanEnv(dir), "LD_LIBRARY_PATH="+lib), bin, "trace", "-q", "--", app, "liba.so", "@"+more+"/conf")
	runIn(t, dir, clitest.CleanEnv(dir), bin, "build", "-o", "app.dlimg", "--include", filepath.Join(dir, "tree"))
	env := append(clitest.CleanEnv(dir), "LD_LIBRARY_PATH="+more+":"+lib)
	args := []string{app, "liba.so", "libnone.so", "liblate.so"}
	native := runIn(t, dir, env, app, args[1:]...)
	if native != "liba.so loaded\nlibnone.so not found\nliblate.so loaded\n" {
		t.Fatalf("natively: %q", native)
	}
	stage := filepath.Join(dir, "stage")
	under := runIn(t, dir, env, bin, append([]string{"exec", "--stage-dir", stage, filepath.Join(dir, "app.dlimg"), "--"}, args...)...)
	if under != native {
		t.Errorf("under exec:\n%s\nnatively:\n%s", under, native)
	}
	// The case is the one described: more/tls/ is listed, not bundled.
	bundled, external := bundledPaths(t, filepath.Join(dir, "app.dlimg"))
	if !bundled[more] || bundled[more+"/tls"] || !external[more+"/tls"] {
		t.Errorf("more/ bundled %v, more/tls bundled %v, listed only %v; the test needs true, false, true",
			bundled[more], bundled[more+"/tls"], external[more+"/tls"])
	}
}

// A tree with what a numpy tree lacks: symlinks to a file, to a directory
// and to nothing, a fifo (the image keeps "other" only: the shim lstats the
// original for its d_type), names with blanks and UTF-8, a directory the
// image does not bundle, and 300 names (several getdents64 buffers, and "."
// and ".." among them in ext4's hash order). The pilot is the probe itself,
// so the image holds what it touched. TestShimSanitized runs it with the
// shim built with AddressSanitizer and UBSan.
func TestTreeListingsAsNative(t *testing.T) { testTreeListings(t, nil) }

func testTreeListings(t *testing.T, san *sanitizer) {
	needTools(t, "gcc")
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	sub := filepath.Join(tree, "sub")
	for _, d := range []string{sub, filepath.Join(tree, "unbundled", "deeper")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 300; i++ {
		if err := os.WriteFile(filepath.Join(tree, fmt.Sprintf("f%03d.txt", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"to-file": "f001.txt", "to-dir": "sub", "dangling": "nowhere", "abs": sub} {
		if err := os.Symlink(target, filepath.Join(tree, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"with blank", "ünï", "sub/inner.py"} {
		if err := os.WriteFile(filepath.Join(tree, name), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(dir, "listprobe")
	if out, err := exec.Command("gcc", "-O1", "-Wall", "-o", probe, "testdata/listprobe.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc listprobe.c: %v\n%s", err, out)
	}
	bin := clitest.CLI(t)
	env := clitest.CleanEnv(dir)
	runIn(t, dir, env, bin, "trace", "-q", "--", probe, tree, sub)
	runIn(t, dir, env, bin, "build", "-o", "tree.dlimg", "--include", tree, "--exclude", filepath.Join(tree, "unbundled"))
	img := filepath.Join(dir, "tree.dlimg")
	if b, _ := bundledPaths(t, img); !b[tree] || !b[sub] || b[filepath.Join(tree, "unbundled")] {
		t.Fatalf("the image should bundle %s and sub/ but not unbundled/: %v %v %v", tree, b[tree], b[sub], b[filepath.Join(tree, "unbundled")])
	}
	args := []string{probe, tree, sub, filepath.Join(tree, "unbundled")}
	stageDir := filepath.Join(tmpfsDir(t), "stage")
	var native, under string
	if san == nil {
		native = runIn(t, dir, env, args[0], args[1:]...)
		under = runIn(t, dir, env, bin, append([]string{"exec", "--stage-dir", stageDir, img, "--"}, args...)...)
	} else {
		// Stage, then run the probe with the sanitized objects in the
		// stage and the ASan runtime first (as runConformance does).
		runIn(t, dir, env, bin, "stage", "--stage-dir", stageDir, img)
		stages, err := filepath.Glob(filepath.Join(stageDir, "sha256-*"))
		if err != nil || len(stages) != 1 {
			t.Fatalf("stages %v, %v", stages, err)
		}
		san.install(t, stages[0])
		native = runIn(t, dir, san.env(env), args[0], args[1:]...)
		rep := filepath.Join(dir, "report")
		under = runIn(t, dir, san.env(ShimEnv(stages[0], env, EnvOptions{Report: rep})), args[0], args[1:]...)
		if rs := readReport(t, rep); len(rs) != 1 || rs[0].Answered < 100 {
			t.Fatalf("the sanitized shim answered too little to have served the listings: %+v", rs)
		}
	}
	for _, want := range []string{"readdir fifo type=1 ", "readdir dangling type=10 ", "readlinkat abs " + sub, "getdents64 f299.txt "} {
		if !strings.Contains(native, want) {
			t.Fatalf("the native run lacks %q: the probe is broken\n%.3000s", want, native)
		}
	}
	diffLines(t, "listprobe.c", native, under)
}
