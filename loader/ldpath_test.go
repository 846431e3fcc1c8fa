package loader

// LD_LIBRARY_PATH under `dlbundle exec`: ld.so stats the directory of every
// failed candidate (each LD_LIBRARY_PATH entry and its hwcaps subdirectories)
// itself, out of reach of the audit module. ShimEnv therefore maps bundled
// entries to the stage and the preload puts the app's own value back before
// main. This test runs a real program through trace -> build -> exec under
// strace and asserts that nothing below its tree is looked up at all, while
// the program (and a child it execs) sees what it sees natively.

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

const ldpathProgram = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
int foo(void);
static const char *who;
static int phdr(struct dl_phdr_info *i, size_t size, void *data)
{
	(void)size; (void)data;
	printf("%s phdr=%s\n", who, i->dlpi_name);
	return 0;
}
int main(int argc, char **argv)
{
	who = argc > 1 ? argv[1] : "main";
	const char *llp = getenv("LD_LIBRARY_PATH");
	printf("%s LD_LIBRARY_PATH=%s\n", who, llp ? llp : "(unset)");
	void *h = dlopen("libbar.so", RTLD_NOW);
	if (!h) { printf("%s dlopen: %s\n", who, dlerror()); return 1; }
	int (*bar)(void) = (int (*)(void))dlsym(h, "bar");
	Dl_info di;
	if (dladdr((void *)foo, &di)) printf("%s dladdr foo=%s\n", who, di.dli_fname);
	if (dladdr((void *)bar, &di)) printf("%s dladdr bar=%s\n", who, di.dli_fname);
	char origin[4096];
	if (dlinfo(h, RTLD_DI_ORIGIN, origin) == 0) printf("%s origin bar=%s\n", who, origin);
	printf("%s foo+bar=%d\n", who, foo() + bar());
	fflush(stdout);
	dl_iterate_phdr(phdr, NULL);
	fflush(stdout);
	if (argc > 1 && !strcmp(argv[1], "parent")) {
		pid_t pid = fork();
		if (pid == 0) {
			char *args[] = {argv[0], "child", NULL};
			execv(argv[0], args);
			_exit(127);
		}
		int st;
		waitpid(pid, &st, 0);
		printf("parent child-status=%d\n", st);
	}
	return 0;
}
`

func TestExecLibraryPathZeroOperationsOnTree(t *testing.T) {
	for _, tool := range []string{"strace", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make deps installs it): %v", tool, err)
		}
	}
	bin := clitest.CLI(t)
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	libdir := filepath.Join(tree, "lib", "x86_64-linux-gnu")
	// tls/ and glibc-hwcaps/ exist but hold nothing: ld.so probes them,
	// natively finds the directories, and must find them in the stage as
	// well; cmake/ is a directory ld.so never looks at.
	for _, d := range []string{filepath.Join(tree, "bin"), filepath.Join(libdir, "tls"),
		filepath.Join(libdir, "glibc-hwcaps"), filepath.Join(libdir, "cmake", "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// libfoo.so's constructor runs before the preload's: it must see the
	// app's LD_LIBRARY_PATH too.
	foo := "#include <stdio.h>\n#include <stdlib.h>\nint foo(void) { return 40; }\n" +
		"__attribute__((constructor)) static void init(void) { const char *v = getenv(\"LD_LIBRARY_PATH\"); " +
		"printf(\"constructor LD_LIBRARY_PATH=%s\\n\", v ? v : \"(unset)\"); fflush(stdout); }\n"
	srcs := map[string]string{"foo.c": foo, "bar.c": "int bar(void) { return 2; }\n", "app.c": ldpathProgram}
	for name, src := range srcs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gcc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", append([]string{"-O1", "-Wl,--no-as-needed"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	gcc("-shared", "-fPIC", "-o", filepath.Join(libdir, "libfoo.so"), filepath.Join(dir, "foo.c"))
	gcc("-shared", "-fPIC", "-o", filepath.Join(libdir, "libbar.so"), filepath.Join(dir, "bar.c"))
	// No RPATH/RUNPATH: libfoo.so (DT_NEEDED) and libbar.so (dlopen) are
	// found through LD_LIBRARY_PATH only.
	app := filepath.Join(tree, "bin", "app")
	gcc("-o", app, filepath.Join(dir, "app.c"), "-L"+libdir, "-lfoo", "-ldl")

	env := append(clitest.CleanEnv(dir), "LD_LIBRARY_PATH="+libdir)
	cmd := []string{app, "parent"}
	runIn(t, dir, env, bin, append([]string{"trace", "--"}, cmd...)...)
	runIn(t, dir, env, bin, "build", "-o", "app.dlimg", "--include", tree)
	execArgs := append([]string{bin, "exec", "--stage-dir", filepath.Join(dir, "stage"), filepath.Join(dir, "app.dlimg"), "--"}, cmd...)
	runIn(t, dir, env, execArgs[0], execArgs[1:]...) // stage (cold)

	underTree := func(name string, args ...string) (out string, n int, report []string) {
		log := filepath.Join(dir, name+".strace")
		out = runIn(t, dir, env, "strace", append([]string{"-f", "-qq", "-y", "-s", "4096",
			"-e", "trace=%file,getdents64", "-o", log}, args...)...)
		for p, lines := range straceOps(t, log, dir) {
			if p == tree || strings.HasPrefix(p, tree+"/") {
				n += len(lines)
				report = append(report, p+"\n        e.g. "+lines[0])
			}
		}
		sort.Strings(report)
		return out, n, report
	}
	native, nNative, _ := underTree("native", cmd...)
	if nNative == 0 {
		t.Fatal("natively the program made no operation below its tree: the check is broken")
	}
	warm, n, report := underTree("exec", execArgs...)
	t.Logf("operations below the tree: native %d, exec (warm) %d", nNative, n)
	if n != 0 {
		t.Errorf("under exec %d system calls still looked up paths below %s:\n%s", n, tree, strings.Join(report, "\n"))
	}

	// The same view natively and under exec, in the program and in its child:
	// LD_LIBRARY_PATH, dladdr, dlinfo origin and dl_iterate_phdr names. The
	// shim's own objects show in dl_iterate_phdr (docs/loader.md): the preload,
	// and with the glibc 2.17 build (preload.so) the libdl.so.2 it needs, when
	// the program does not load that itself.
	nativeLines := map[string]bool{}
	for _, l := range strings.Split(native, "\n") {
		nativeLines[l] = true
	}
	legacy := strings.Contains(warm, "/shim/"+stagefmt.PreloadObject+"\n")
	withoutShim := func(out string) []string {
		var keep []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasSuffix(l, "/shim/"+stagefmt.PreloadObject) || strings.HasSuffix(l, "/shim/"+stagefmt.Preload234Object) ||
				legacy && strings.HasSuffix(l, "/libdl.so.2") && !nativeLines[l] {
				continue
			}
			keep = append(keep, l)
		}
		return keep
	}
	for _, want := range []string{"constructor LD_LIBRARY_PATH=" + libdir, "parent LD_LIBRARY_PATH=" + libdir, "child LD_LIBRARY_PATH=" + libdir,
		"child dladdr bar=" + filepath.Join(libdir, "libbar.so"), "parent child-status=0"} {
		if !strings.Contains(native, want+"\n") {
			t.Fatalf("native output lacks %q:\n%s", want, native)
		}
	}
	if got, want := strings.Join(withoutShim(warm), "\n"), strings.Join(withoutShim(native), "\n"); got != want {
		t.Errorf("the program sees a different world under exec:\nnative:\n%s\nexec:\n%s", want, got)
	}
}

// ShimEnv maps exactly the LD_LIBRARY_PATH entries that name directories the
// stage bundles (through symlinks too), in place, keeps the app's value and
// the mapped one for the shim, and undoes an outer mapping when dlbundle exec
// runs under itself.
func TestShimEnvMapsBundledLibraryPath(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	for _, d := range []string{"lib", "other"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tree, "lib", "libx.so"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("lib", filepath.Join(tree, "libl")); err != nil {
		t.Fatal(err)
	}
	entries := append(treeimage.Entries(t, filepath.Join(tree, "lib")), treeimage.Entry(t, filepath.Join(tree, "libl")))
	stage := stageEntries(t, dir, entries)
	root := filepath.Join(stage, "root")

	llp := strings.Join([]string{tree + "/lib", "rel/lib", tree + "/other", tree + "/libl", "$ORIGIN/../lib", "", tree + "/lib/libx.so"}, ":")
	mapped := strings.Join([]string{root + tree + "/lib", "rel/lib", tree + "/other", root + tree + "/libl", "$ORIGIN/../lib", "", tree + "/lib/libx.so"}, ":")
	env := ShimEnv(stage, []string{"A=1", "LD_LIBRARY_PATH=" + llp, "B=2"}, EnvOptions{})
	if env[1] != "LD_LIBRARY_PATH="+mapped {
		t.Errorf("LD_LIBRARY_PATH slot = %q\nwant %q", env[1], "LD_LIBRARY_PATH="+mapped)
	}
	for _, want := range []string{EnvNativeEnv + "=LD_LIBRARY_PATH=" + llp, EnvMappedEnv + "=LD_LIBRARY_PATH=" + mapped} {
		if !slices.Contains(env, want) {
			t.Errorf("ShimEnv = %q; lacks %q", env, want)
		}
	}
	// dlbundle exec started by an app under dlbundle exec: the same result.
	if again := ShimEnv(stage, env, EnvOptions{}); !slices.Equal(again, env) {
		t.Errorf("ShimEnv under itself = %q\nwant %q", again, env)
	}
	// ... and under another stage that bundles none of it: the app's value.
	other := ShimEnv(filepath.Join(dir, "no-such-stage"), env, EnvOptions{})
	if other[1] != "LD_LIBRARY_PATH="+llp || strings.Contains(strings.Join(other, "\n"), EnvNativeEnv) {
		t.Errorf("ShimEnv under another stage = %q; want LD_LIBRARY_PATH=%s and no %s", other, llp, EnvNativeEnv)
	}
	// Nothing to map: no DLBUNDLE_*_ENV either.
	for _, v := range []string{tree + "/other", tree + "/lib;" + tree + "/other"} {
		env := ShimEnv(stage, []string{"LD_LIBRARY_PATH=" + v}, EnvOptions{})
		if env[0] != "LD_LIBRARY_PATH="+v || strings.Contains(strings.Join(env, "\n"), EnvNativeEnv) {
			t.Errorf("ShimEnv with LD_LIBRARY_PATH=%s = %q; want it untouched", v, env)
		}
	}
}
