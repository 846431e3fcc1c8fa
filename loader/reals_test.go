package loader

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// The preload takes its real functions from the stage's record of libc
// (STAGE/search, loader/stagefmt/reals.go) instead of looking each up, but
// only where nothing lies between it and libc that may define the name:
// with an interposer preloaded after the shim (darshan does this for
// open, read, write...), the shim's open passes through to the interposer,
// as dlsym(RTLD_NEXT) finds it, and not to libc's open straight from the
// record (the check can fail: without the bloom filter test the interposer
// prints nothing).
func TestRealFunctionsFromTheStageKeepRTLDNext(t *testing.T) {
	p := clitest.NewProbeImage(t)
	all, _ := launcherlessEnv(t, p.Work, "--stage-dir", filepath.Join(p.Work, "stage"), p.Image)
	env, preload := []string{"DLBUNDLE_DEBUG=1"}, ""
	for _, kv := range all {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			preload = v // given below, with the interposer after it or not
			continue
		}
		env = append(env, kv)
	}
	dir := t.TempDir()
	write := func(name, src string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	lib, app := filepath.Join(dir, "libinterpose.so"), filepath.Join(dir, "app")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-o", lib, write("interpose.c", `#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>
int open(const char *p, int flags, ...) {
	va_list ap; va_start(ap, flags); int mode = va_arg(ap, int); va_end(ap);
	static const char m[] = "interposed open\n";
	write(2, m, sizeof m - 1);
	int (*next)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	return next(p, flags, mode);
}
`)},
		{"-o", app, write("app.c", `#include <fcntl.h>
#include <stdio.h>
int main(void) { int fd = open("/etc/hostname", O_RDONLY); printf("fd %d\n", fd); return fd < 0; }
`)},
	} {
		if out, err := exec.Command("gcc", append([]string{"-O1"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	run := func(preloads string) string {
		cmd := exec.Command(app)
		cmd.Env = append(append([]string{}, env...), "LD_PRELOAD="+preloads)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("LD_PRELOAD=%s %s: %v\n%s", preloads, app, err, out)
		}
		return string(out)
	}
	alone := run(preload)
	if m := regexp.MustCompile(`real functions: (\d+) from the stage's record, 0 by dlsym`).FindStringSubmatch(alone); m == nil || len(m[1]) < 2 {
		t.Errorf("with nothing between the shim and libc, want every real function from the stage's record:\n%s", alone)
	}
	both := run(preload + ":" + lib)
	if !strings.Contains(both, "interposed open") {
		t.Errorf("the shim's open skipped the interposer preloaded after it:\n%s", both)
	}
	if strings.Contains(both, ", 0 by dlsym") || !strings.Contains(both, "real functions: ") {
		t.Errorf("with an interposer between the shim and libc, want its names looked up with dlsym:\n%s", both)
	}
}
