package loader

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// permissionProbe prints what a process may do with a root-owned file it
// may not read, and with its own root-owned executable, through the calls
// make conformance found answered from the staged copy (which belongs to
// the stage's user): fopen (glibc's fopen opens below our open()), open,
// access/faccessat of /proc/self/exe for writing.
const permissionProbe = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static const char *res(int ok) { return ok ? "ok" : strerror(errno); }
int main(int argc, char **argv)
{
	FILE *f = fopen(argv[1], "r");
	printf("fopen secret: %s\n", res(f != NULL));
	int fd = open(argv[1], O_RDONLY);
	printf("open secret: %s\n", res(fd >= 0));
	printf("access(W_OK) /proc/self/exe: %s\n", res(access("/proc/self/exe", W_OK) == 0));
	printf("faccessat(W_OK, AT_EACCESS) /proc/self/exe: %s\n", res(faccessat(AT_FDCWD, "/proc/self/exe", W_OK, AT_EACCESS) == 0));
	printf("access(X_OK) /proc/self/exe: %s\n", res(access("/proc/self/exe", X_OK) == 0));
	printf("access(R_OK) secret: %s\n", res(access(argv[1], R_OK) == 0));
	return 0;
}
`

// TestOriginalPermissionsOfStagedFiles: a user runs an image whose files
// are root's (a mode-000 data file, a 0755 executable) from a stage of
// their own. The staged copies are the user's, so the kernel would let them
// read the first and write the second; the shim answers as for the
// originals. make conformance found fopen of the mode-000 file returning
// its content and access(W_OK) of /proc/self/exe succeeding as uid 1001
// (main 270e414); open and access of the path itself were already right.
func TestOriginalPermissionsOfStagedFiles(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("runs as root (it switches to nobody)")
	}
	root := t.TempDir()
	tree, bin := probeTree(t, root, "perm", permissionProbe)
	secret := filepath.Join(tree, "secret")
	if err := os.WriteFile(secret, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secret, 0); err != nil {
		t.Fatal(err)
	}
	stage := stageEntries(t, root, entriesBelow(t, tree))
	// The stage is nobody's own, as if nobody had staged it.
	err := filepath.Walk(stage, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 65534, 65534)
	})
	if err != nil {
		t.Fatal(err)
	}
	for d := root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	staged, ok := StagedPath(stage, bin)
	if !ok {
		t.Fatal("the probe is not bundled")
	}
	run := func(path string, env []string) string {
		cmd := exec.Command(bin, secret)
		if path != "" {
			cmd.Path = path
		}
		cmd.Env = env
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", bin, err, out)
		}
		return string(out)
	}
	env := probeEnv("/")
	native := run("", env)
	if strings.Count(native, "Permission denied") != 5 {
		t.Fatalf("native run as nobody: want 5 refusals:\n%s", native)
	}
	diffLines(t, "permission probe", native, run(staged, ShimEnv(stage, env, EnvOptions{})))
}
