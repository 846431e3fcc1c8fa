package node

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenStageDirCreatesPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "dlbundle-test")
	got, err := OpenStageDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(got)
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("stage dir created with mode %v; want a 0700 directory", st.Mode())
	}
	// Opening it again (the next rank) passes the same checks.
	if _, err := OpenStageDir(dir); err != nil {
		t.Fatalf("reopening a good stage dir: %v", err)
	}
}

// A stage dir that another user could write into is refused, every time it
// is opened, with a message that says why and what to do.
func TestOpenStageDirRefusesHostileDirs(t *testing.T) {
	tmp := t.TempDir()
	cases := map[string]struct {
		setup func(path string) error
		want  string
	}{
		"world-writable": {func(p string) error {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chmod(p, 0o777)
		}, "has mode 0777"},
		"group-writable": {func(p string) error {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chmod(p, 0o770)
		}, "group or world writable"},
		"symlink": {func(p string) error {
			target := filepath.Join(tmp, "elsewhere")
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			return os.Symlink(target, p)
		}, "is a symbolic link"},
		"regular file": {func(p string) error { return os.WriteFile(p, nil, 0o600) }, "is not a directory"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(tmp, strings.ReplaceAll(name, " ", "-"))
			if err := c.setup(p); err != nil {
				t.Fatal(err)
			}
			_, _, err := OpenStageDirFor(p)
			if !errors.Is(err, ErrUnsafeStageDir) || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), p+" was given by --stage-dir") ||
				strings.Contains(err.Error(), "use --stage-dir") {
				t.Fatalf("OpenStageDirFor(%s) = %v; want a refusal saying %q and that the given dir must change (not \"use --stage-dir\", which was used)", name, err, c.want)
			}
		})
	}
}

// A stage dir owned by another user is refused. As root the test makes one
// (chown to nobody); otherwise /usr serves (owned by root).
func TestOpenStageDirRefusesOtherOwner(t *testing.T) {
	dir := "/usr"
	if os.Getuid() == 0 {
		dir = filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("chown", "nobody", dir).CombinedOutput(); err != nil {
			t.Fatalf("chown nobody: %v: %s", err, out)
		}
	}
	_, err := OpenStageDir(dir)
	if !errors.Is(err, ErrUnsafeStageDir) || !strings.Contains(err.Error(), "is owned by uid") {
		t.Fatalf("OpenStageDir(%s owned by another user) = %v; want a refusal", dir, err)
	}
}

func TestResolveStageDir(t *testing.T) {
	t.Setenv(StageDirEnv, "/from/env")
	if got := ResolveStageDir("/from/flag"); got != "/from/flag" {
		t.Errorf("flag: got %s", got)
	}
	if got := ResolveStageDir(""); got != "/from/env" {
		t.Errorf("env: got %s", got)
	}
	t.Setenv(StageDirEnv, "")
	t.Setenv("TMPDIR", "/scratch")
	got := ResolveStageDir("")
	// On a node with a writable tmpfs /dev/shm the default is there, else under TMPDIR.
	want := "/scratch/dlbundle-"
	if isWritableTmpfs("/dev/shm") {
		want = "/dev/shm/dlbundle-"
	}
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "-"+itoa(os.Getuid())) {
		t.Errorf("default stage dir %s; want %s<uid>", got, want)
	}
}

// Without a chosen directory the advice is to choose one; with one, it is to
// choose another (refusals once said "use --stage-dir" to users who had).
func TestStageDirAdvice(t *testing.T) {
	base := refuseStageDir("/dev/shm/dlbundle-1000", "is owned by uid 1001, not 1000")
	if got := stageDirAdvice(base, "/dev/shm/dlbundle-1000", false).Error(); !strings.HasSuffix(got, "; use --stage-dir DIR (or DLBUNDLE_STAGE_DIR) to stage elsewhere") {
		t.Errorf("default dir: %q", got)
	}
	got := stageDirAdvice(base, "/scratch/s", true)
	if !errors.Is(got, ErrUnsafeStageDir) || strings.Contains(got.Error(), "use --stage-dir") ||
		!strings.Contains(got.Error(), "/scratch/s was given by --stage-dir or DLBUNDLE_STAGE_DIR: give another directory") {
		t.Errorf("given dir: %q", got)
	}
}

// A stage dir a launcher plugin took from the site's configuration (the
// Slurm plugin's stage_dir= in plugstack.conf) is named as the site's
// setting, for the administrator: the user neither gave it nor can change it.
func TestStageDirAdviceSiteSetting(t *testing.T) {
	t.Setenv(StageDirSourceEnv, "stage_dir= in Slurm's plugstack.conf")
	base := refuseStageDir("/local/dlbundle", "is writable by others")
	got := stageDirAdvice(base, "/local/dlbundle", true).Error()
	if strings.Contains(got, "was given by --stage-dir") || !strings.Contains(got, "/local/dlbundle is the site's setting (stage_dir= in Slurm's plugstack.conf): ask the site's administrator") {
		t.Errorf("site's dir: %q", got)
	}
}
