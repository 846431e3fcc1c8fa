package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeInstallSlurm: make install, with nothing but PREFIX given, asks a
// running Slurm (its own cluster: slurm.conf names a plugin dir and a
// plugstack.conf of the test's) where its plugins go, installs the SPANK
// plugin there and its line in plugstack.conf.d (adding the include line to
// a plugstack.conf that had none), and srun --dlbundle=IMAGE then runs a
// step served from the stage through the installed dlbundle; a missing
// image fails the step. make uninstall removes every file and line install
// listed: plugstack.conf is as before, the prefix is gone, and srun no
// longer knows --dlbundle.
func TestMakeInstallSlurm(t *testing.T) {
	if _, err := os.Stat("/usr/include/slurm/spank.h"); err != nil {
		t.Fatal("/usr/include/slurm/spank.h is missing: install libslurm-dev (make deps)")
	}
	// Not under /tmp: every fake node has its own.
	dir, err := os.MkdirTemp("/var/tmp", "dlbundle-install-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	plugins := filepath.Join(dir, "slurm-plugins")
	etc := filepath.Join(dir, "etc")
	for _, d := range []string{plugins, etc} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	plugstack := filepath.Join(etc, "plugstack.conf")
	before := "# the site's own plugins go here\n"
	write(t, plugstack, before)
	// The site's PluginDir first, then Slurm's own plugins (a list, as
	// slurm.conf allows): install must take the first.
	c, err := Start(Options{Nodes: 2, Conf: []string{
		"PluginDir=" + plugins + ":/usr/lib/x86_64-linux-gnu/slurm-wlm",
		"PlugStackConfig=" + plugstack,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	root, _ := filepath.Abs(filepath.Join("..", ".."))
	prefix := filepath.Join(dir, "prefix")
	mk := func(target string) string {
		t.Helper()
		cmd := exec.Command("make", "-C", root, "--no-print-directory", target, "PREFIX="+prefix, "WITH_FLUX=no")
		cmd.Env = c.Env(os.Environ())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, out)
		}
		return string(out)
	}
	out := mk("install")
	so := filepath.Join(plugins, "spank_dlbundle.so")
	confd := filepath.Join(etc, "plugstack.conf.d", "dlbundle.conf")
	for _, want := range []string{filepath.Join(prefix, "bin", "dlbundle"), so, confd} {
		if _, err := os.Stat(want); err != nil || !strings.Contains(out, want) {
			t.Errorf("make install: %s not installed or not printed (%v):\n%s", want, err, out)
		}
	}
	if b, _ := os.ReadFile(confd); !strings.Contains(string(b), "required "+so+" dlbundle="+filepath.Join(prefix, "bin", "dlbundle")) {
		t.Errorf("%s:\n%s\nwant a required line naming %s and the installed dlbundle", confd, b, so)
	}
	manifest, err := os.ReadFile(filepath.Join(prefix, "share", "dlbundle", "install-manifest"))
	if err != nil {
		t.Fatal(err)
	}

	p := newProbe(t, "install")
	srun := func(args ...string) result {
		cmd := c.Command("srun", args...)
		cmd.Env = append(cmd.Env, "DLBUNDLE_STAGE_DIR=/dev/shm/t-install")
		return runCmd(t, cmd)
	}
	r := srun("-N2", "--ntasks-per-node=2", "--dlbundle="+p.image[1], p.original, "arg1")
	if r.code != 0 {
		t.Fatalf("srun --dlbundle with the installed plugin: exit %d\n%s\n%s", r.code, r.out, c.Logs())
	}
	if nodes := ranks(t, r.out, 4, 1, p); len(nodes) != 2 {
		t.Errorf("ranks ran on %v, want 2 nodes", nodes)
	}
	if r := srun("-N1", "-n1", "--dlbundle="+filepath.Join(c.Shared, "no-such.dlimg"), "/bin/echo", "RAN-NATIVELY"); r.code == 0 || strings.Contains(r.out, "RAN-NATIVELY") {
		t.Errorf("missing image with the installed line: exit %d, want a failed step and no task run:\n%s", r.code, r.out)
	}

	out = mk("uninstall")
	for _, l := range strings.Split(strings.TrimSpace(string(manifest)), "\n") {
		kind, rest, _ := strings.Cut(l, " ")
		if kind == "file" || kind == "dir" {
			if _, err := os.Lstat(rest); err == nil {
				t.Errorf("make uninstall left %s (listed as %q)", rest, l)
			}
		}
	}
	if _, err := os.Stat(prefix); err == nil {
		t.Errorf("make uninstall left %s:\n%s", prefix, out)
	}
	if left, _ := os.ReadDir(plugins); len(left) != 0 {
		t.Errorf("make uninstall left %v in the plugin dir", left)
	}
	if b, _ := os.ReadFile(plugstack); string(b) != before {
		t.Errorf("plugstack.conf after uninstall:\n%s\nwant as before install:\n%s", b, before)
	}
	if r := srun("-N1", "-n1", "--dlbundle="+p.image[1], p.original); r.code == 0 {
		t.Errorf("srun --dlbundle after uninstall: exit 0, want srun to reject the option it no longer has:\n%s", r.out)
	}
}
