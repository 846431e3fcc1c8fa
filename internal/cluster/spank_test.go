package cluster

// srun --dlbundle=IMAGE through the SPANK plugin (launchers/slurm): no
// dlbundle process between slurmstepd and the app; dlbundle env runs once
// per node and step.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

func needSpank(t *testing.T) {
	t.Helper()
	if spankBuilt != "" {
		t.Fatalf("the SPANK plugin is not loaded: %s", spankBuilt)
	}
}

// srunDlbundle runs srun with args, the stage dir set for the job.
func srunDlbundle(t *testing.T, stageDir string, args ...string) result {
	t.Helper()
	cmd := shared.Command("srun", args...)
	cmd.Env = append(cmd.Env, "DLBUNDLE_STAGE_DIR="+stageDir)
	return runCmd(t, cmd)
}

// clearEnvRuns empties every node's record of dlbundle env runs.
func clearEnvRuns(t *testing.T) {
	t.Helper()
	for _, n := range shared.Nodes {
		shared.OnNode(n, "rm", "-f", envRuns).Run()
	}
}

// envRunsPerNode returns, per node, the job steps for which the plugin ran
// dlbundle env.
func envRunsPerNode(t *testing.T) map[string][]string {
	t.Helper()
	runs := map[string][]string{}
	for _, n := range shared.Nodes {
		out, _ := shared.OnNode(n, "cat", envRuns).Output()
		runs[n] = strings.Fields(string(out))
	}
	return runs
}

// TestSpankDlbundleOneStagingPerNode: srun --dlbundle on 3 nodes x 4 ranks
// runs the probe, which exists only in the image (its original path is not
// on this machine: slurmstepd can start it only from the stage), with
// /proc/self/exe the original path; dlbundle env runs once per node and
// step; the image is read once per node (exactly 3 x the operations of
// one node's step).
func TestSpankDlbundleOneStagingPerNode(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spank")
	img := p.image[1]
	if _, err := os.Stat(p.original); err == nil {
		t.Fatalf("%s exists on this machine; the test needs a program only the image holds", p.original)
	}
	sfs.Reset()
	clearEnvRuns(t)
	r := srunDlbundle(t, "/dev/shm/t-spank-one", "-N1", "-n1", "-w", "node1", "--dlbundle="+img, p.original, "arg1")
	if r.code != 0 {
		t.Fatalf("srun --dlbundle: exit %d\n%s\n%s", r.code, r.out, shared.Logs())
	}
	ranks(t, r.out, 1, 1, p)
	perNodeOps := imageOps(img)
	if perNodeOps == 0 {
		t.Fatal("one node's step made no operation on the image; the count cannot work")
	}

	sfs.Reset()
	clearEnvRuns(t)
	start := time.Now()
	r = srunDlbundle(t, "/dev/shm/t-spank", "-N3", "--ntasks-per-node=4", "--dlbundle="+img, p.original, "arg1")
	t.Logf("srun --dlbundle -N3 --ntasks-per-node=4: %v", time.Since(start).Round(time.Millisecond))
	if r.code != 0 {
		t.Fatalf("srun --dlbundle: exit %d\n%s\n%s", r.code, r.out, shared.Logs())
	}
	nodes := ranks(t, r.out, 12, 1, p)
	if len(nodes) != 3 {
		t.Errorf("ranks ran on %v, want 3 nodes", nodes)
	}
	if !strings.Contains(r.out, "arg=arg1") {
		t.Errorf("the app's argument did not reach it:\n%s", r.out)
	}
	if ops := imageOps(img); ops != 3*perNodeOps {
		t.Errorf("3 nodes x 4 ranks: %d operations on the image; want 3 x %d (one read per node)", ops, perNodeOps)
	}
	for n, steps := range envRunsPerNode(t) {
		if len(steps) != 1 {
			t.Errorf("%s: dlbundle env ran for steps %v; want once for the step", n, steps)
		}
		if s := stagesOn(t, n, "/dev/shm/t-spank"); len(s) != 1 {
			t.Errorf("%s has stages %v, want exactly one", n, s)
		}
	}
	// A second step of a job on the same nodes: one env run per node again,
	// the stage reused (no second stage).
	clearEnvRuns(t)
	r = srunDlbundle(t, "/dev/shm/t-spank", "-N3", "--ntasks-per-node=2", "--dlbundle="+img, p.original)
	if r.code != 0 {
		t.Fatalf("second srun: exit %d\n%s", r.code, r.out)
	}
	ranks(t, r.out, 6, 1, p)
	for n, steps := range envRunsPerNode(t) {
		if len(steps) != 1 {
			t.Errorf("%s, second step: dlbundle env ran for steps %v; want once", n, steps)
		}
	}
}

// TestSpankDlbundleFailureEndsStep: a missing image, a corrupt one and
// another user's in a world-writable directory end the step with
// dlbundle's own message and run no task; nothing is left half-staged.
// With --dlbundle-fallback the tasks run natively.
func TestSpankDlbundleFailureEndsStep(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spankfail")
	corrupt := filepath.Join(shared.Shared, "spank-corrupt.dlimg")
	b, err := os.ReadFile(p.image[1])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 3; i < len(b)-64; i += 97 {
		b[i] ^= 0x5a // the content, not only the footer
	}
	if err := os.WriteFile(corrupt, b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(shared.Shared, "no-such.dlimg")
	// Hostile: another user's image (uid 65534, a program printing PWNED at
	// the probe's path) in a directory every user can write.
	ww := filepath.Join(shared.Shared, "spank-world-writable")
	os.RemoveAll(ww)
	if err := os.Mkdir(ww, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(ww, 0o1777)
	planted := filepath.Join(ww, "app.dlimg")
	if b, err := os.ReadFile(pwnedImage(t, p)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(planted, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{missing, corrupt, planted} {
		stage := "/dev/shm/t-spank-fail"
		r := srunDlbundle(t, stage, "-N3", "--ntasks-per-node=2", "--dlbundle="+img, p.native[1])
		if r.code == 0 || strings.Contains(r.out, "version=") || strings.Contains(r.out, "PWNED") {
			t.Errorf("%s: srun exit %d and the tasks ran:\n%s", filepath.Base(img), r.code, r.out)
		}
		t.Logf("%s: %s", filepath.Base(img), firstLine(r.out, "dlbundle: "))
		if !strings.Contains(r.out, "dlbundle: ") || !strings.Contains(r.out, filepath.Base(img)) {
			t.Errorf("%s: srun's output does not carry dlbundle's message naming the image:\n%s", filepath.Base(img), r.out)
		}
		for _, n := range shared.Nodes {
			out, _ := shared.OnNode(n, "sh", "-c", "ls -a "+stage+" 2>/dev/null | grep -E '^(tmp\\.|sha256-)'").Output()
			if len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("%s: %s holds %q after a failed stage", filepath.Base(img), n, out)
			}
		}
		r = srunDlbundle(t, stage, "-N3", "--ntasks-per-node=2", "--dlbundle="+img, "--dlbundle-fallback", p.native[1])
		if r.code != 0 || strings.Count(r.out, "staged=no") != 6 {
			t.Errorf("%s with --dlbundle-fallback: exit %d; want 6 native tasks:\n%s", filepath.Base(img), r.code, r.out)
		}
	}
}

// TestSpankDlbundleFailureEndsStepOptional: under an `optional`
// plugstack.conf line, where Slurm 22.05 ignores the errors a plugin
// returns, a missing and a corrupt image still fail the step: srun exits
// non-zero, no task runs natively, and srun's output carries dlbundle's
// message once, with srun's own option as the one hint.
func TestSpankDlbundleFailureEndsStepOptional(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spankoptional")
	restore := plugstackLine(t, "optional", "")
	defer restore()
	corrupt := filepath.Join(shared.Shared, "spank-optional-corrupt.dlimg")
	b, err := os.ReadFile(p.image[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(shared.Shared, "no-such-optional.dlimg")
	for _, img := range []string{missing, corrupt} {
		r := srunDlbundle(t, "/dev/shm/t-spank-optional", "-N3", "--ntasks-per-node=2", "--dlbundle="+img, p.native[1])
		t.Logf("%s: exit %d\n%s", filepath.Base(img), r.code, r.out)
		if r.code == 0 || strings.Contains(r.out, "version=") || strings.Contains(r.out, "staged=") {
			t.Errorf("%s under an optional line: srun exit %d and the tasks ran:\n%s", filepath.Base(img), r.code, r.out)
		}
		if !strings.Contains(r.out, "dlbundle: ") || !strings.Contains(r.out, filepath.Base(img)) {
			t.Errorf("%s: srun's output does not carry dlbundle's message naming the image:\n%s", filepath.Base(img), r.out)
		}
		if strings.Contains(r.out, "use --fallback") || strings.Contains(r.out, "usage: dlbundle") {
			t.Errorf("%s: srun's output gives dlbundle's own hint or usage, not srun's:\n%s", filepath.Base(img), r.out)
		}
		if !strings.Contains(r.out, "--dlbundle-fallback") {
			t.Errorf("%s: srun's output does not name --dlbundle-fallback:\n%s", filepath.Base(img), r.out)
		}
	}
}

// plugstackLine rewrites the plugin's plugstack.conf line with the control
// word (required, optional) and extra arguments (srun and slurmstepd read
// the file at each step); the returned function puts it back.
func plugstackLine(t *testing.T, control, args string) func() {
	t.Helper()
	conf := filepath.Join(tools, "plugstack.conf")
	orig, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(orig))
	f[0] = control
	line := strings.Join(f, " ")
	if args != "" {
		line += " " + args
	}
	if err := os.WriteFile(conf, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return func() { os.WriteFile(conf, orig, 0o644) }
}

// srunRankStrace runs one task under strace, its log named after its rank.
// The task itself (this script) is started by slurmstepd with the plugin's
// variables, so strace and the app inherit them.
const srunRankStrace = `#!/bin/sh
exec strace -f --seccomp-bpf -qq -y -e signal=none -e trace=%%file -o "%s/rank.$SLURM_PROCID" "$@"
`

// TestSpankDlbundleCAppAndNumpy: the C app with RUNPATH and dlopen (the
// demo's) and Python importing numpy, 3 nodes x 4 ranks under srun
// --dlbundle: output as native, and rank by rank no call on a path the
// image decides (strace).
func TestSpankDlbundleCAppAndNumpy(t *testing.T) {
	needSpank(t)
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"c-runpath-dlopen", demoApp(t), "checksum"},
		{"numpy", []string{"/usr/bin/python3", "-I", "-B", "-c",
			"import numpy, os, sys; print('numpy', numpy.arange(10).sum(), numpy.__file__, sys.executable, sys.argv[0], os.environ['SLURM_PROCID'])"}, "numpy 45"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work, img, decides := pilotImage(t, "spank-"+tc.name, tc.argv)
			native := srun(t, append([]string{"-N3", "--ntasks-per-node=4"}, tc.argv...)...)
			if n := strings.Count(native, tc.want); n != 12 {
				t.Fatalf("native: %d of 12 tasks reported %q:\n%s", n, tc.want, native)
			}
			wrapper := filepath.Join(work, "strace-rank.sh")
			write(t, wrapper, fmt.Sprintf(srunRankStrace, filepath.Join(work, "strace")))
			os.Chmod(wrapper, 0o755)
			clearEnvRuns(t)
			stage := fmt.Sprintf("/dev/shm/t-spank-%s-%d", tc.name, time.Now().UnixNano())
			r := srunDlbundle(t, stage, append([]string{"-N3", "--ntasks-per-node=4", "--dlbundle=" + img, wrapper}, tc.argv...)...)
			if r.code != 0 {
				t.Fatalf("srun --dlbundle: exit %d\n%s", r.code, r.out)
			}
			if sortLines(r.out) != sortLines(native) {
				t.Errorf("output under srun --dlbundle differs from native:\nnative:\n%s\ndlbundle:\n%s", sortLines(native), sortLines(r.out))
			}
			for n, steps := range envRunsPerNode(t) {
				if len(steps) != 1 {
					t.Errorf("%s: dlbundle env ran for steps %v; want once", n, steps)
				}
			}
			rankCalls(t, filepath.Join(work, "strace"), "rank.", 12, decides)
		})
	}
}

// pilotImage traces argv in a one-task step, builds its image, and returns
// the work directory in Shared (with an empty strace/ in it), the image and
// what the image decides.
func pilotImage(t *testing.T, name string, argv []string) (work, img string, decides func(string) bool) {
	t.Helper()
	work = filepath.Join(shared.Shared, name)
	os.RemoveAll(work)
	if err := os.MkdirAll(filepath.Join(work, "strace"), 0o755); err != nil {
		t.Fatal(err)
	}
	pilot := runCmd(t, shared.Command("srun", append([]string{"-N1", "-n1", dlb, "trace", "-q", "-o", work + "/pilot.trace", "--"}, argv...)...))
	if pilot.code != 0 {
		t.Fatalf("pilot: %s", pilot.out)
	}
	traces, _ := filepath.Glob(work + "/pilot.trace*")
	img = filepath.Join(work, "app.dlimg")
	// --include: the cluster's "shared file system" lies below /var/tmp,
	// which build leaves out by default (node-local scratch).
	if b, err := exec.Command(dlb, append([]string{"build", "--include", shared.Shared, "-o", img}, traces...)...).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	return work, img, imageDecides(t, img)
}

// demoApp makes the demo's C app (RUNPATH with $ORIGIN, dlopen, a data
// file) in Shared and returns its command line.
func demoApp(t *testing.T) []string {
	t.Helper()
	fixture := filepath.Join(shared.Shared, "demo-app")
	if _, err := os.Stat(filepath.Join(fixture, "bin/demo-app")); err == nil {
		return []string{filepath.Join(fixture, "bin/demo-app")}
	}
	gen, _ := filepath.Abs("../../examples/demo/make-fixture.sh")
	if out, err := exec.Command(gen, fixture, "20").CombinedOutput(); err != nil {
		t.Fatalf("make-fixture.sh: %v\n%s", err, out)
	}
	return []string{filepath.Join(fixture, "bin/demo-app")}
}

// rankCalls checks the strace logs dir/<prefix>0 .. n-1: each shows the app
// started from the stage, and none a call on a path the image decides.
func rankCalls(t *testing.T, dir, prefix string, n int, decides func(string) bool) {
	t.Helper()
	var failed []string
	for rank := 0; rank < n; rank++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s%d", prefix, rank)))
		if err != nil {
			t.Errorf("rank %d: no strace log: %v", rank, err)
			continue
		}
		calls, staged := imageCalls(string(b), shared.Dir, decides)
		if !staged {
			t.Errorf("rank %d: no execve of a staged program; the check cannot work", rank)
		}
		if len(calls) > 0 {
			failed = append(failed, fmt.Sprintf("rank %d: %d calls, first: %s", rank, len(calls), strings.Join(calls[:min(3, len(calls))], " | ")))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d ranks looked up paths the image holds:\n%s", len(failed), n, strings.Join(failed, "\n"))
	}
}

// sortLines is out's lines sorted (ranks finish in any order), without
// srun's own ("srun: job 3 queued and waiting for resources").
func sortLines(out string) string {
	var l []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "srun: ") {
			l = append(l, line)
		}
	}
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// TestSpankSbatchExample runs examples/jobs/spank.sbatch, the image given
// to sbatch (--dlbundle on sbatch's command line stands for the script's
// #SBATCH line): both srun steps of the script run every task from the
// stage, the batch script itself does not run under the shim.
func TestSpankSbatchExample(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spanksbatch")
	out, _ := example(t, "spank.sbatch", []string{"APP=" + p.original + " ok", "DLBUNDLE_STAGE_DIR=/dev/shm/t-spank-sbatch"},
		"--dlbundle="+p.image[1], "-N3", "--ntasks-per-node=2")
	ranks(t, out, 12, 1, p)
}

// firstLine is the first line of out that contains s.
func firstLine(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestSpankSiteDefault: plugstack.conf's default=IMAGE and stage_dir=DIR
// serve a step that names no image (srun and slurmstepd read the file
// at each step, so the test rewrites it and puts it back);
// --dlbundle=none turns the default off for a step; with the site's
// fallback, an image that cannot be staged runs the tasks natively.
func TestSpankSiteDefault(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spankdefault")
	conf := filepath.Join(tools, "plugstack.conf")
	orig, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(conf, orig, 0o644)
	line := strings.TrimSpace(string(orig))
	set := func(args string) {
		if err := os.WriteFile(conf, []byte(line+" "+args+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set("default=" + p.image[1] + " stage_dir=/dev/shm/t-spank-default")
	r := runCmd(t, shared.Command("srun", "-N3", "--ntasks-per-node=1", p.original))
	if r.code != 0 {
		t.Fatalf("srun with the site's default image: exit %d\n%s", r.code, r.out)
	}
	ranks(t, r.out, 3, 1, p)
	for _, n := range shared.Nodes {
		if s := stagesOn(t, n, "/dev/shm/t-spank-default"); len(s) != 1 {
			t.Errorf("%s has stages %v in the site's stage_dir, want one", n, s)
		}
	}
	r = runCmd(t, shared.Command("srun", "-N3", "--ntasks-per-node=1", "--dlbundle=none", p.native[1]))
	if r.code != 0 || strings.Count(r.out, "staged=no") != 3 {
		t.Errorf("--dlbundle=none over the site's default: exit %d, want 3 native tasks:\n%s", r.code, r.out)
	}
	set("default=" + filepath.Join(shared.Shared, "no-such.dlimg") + " fallback")
	r = runCmd(t, shared.Command("srun", "-N3", "--ntasks-per-node=1", p.native[1]))
	if r.code != 0 || strings.Count(r.out, "staged=no") != 3 || !strings.Contains(r.out, "no-such.dlimg") {
		t.Errorf("the site's fallback with an image that cannot be staged: exit %d, want 3 native tasks and a warning naming it:\n%s", r.code, r.out)
	}
}

// TestSpankAuto: srun --dlbundle=auto:DIR with no image yet runs the step
// natively with its first task traced, and the image is built into DIR when
// the step ends; the next step of the same command runs every task from it.
func TestSpankAuto(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spankauto")
	dir := filepath.Join(shared.Shared, fmt.Sprintf("auto-%d", time.Now().UnixNano()))
	stage := "/dev/shm/t-spank-auto"
	r := srunDlbundle(t, stage, "-N3", "--ntasks-per-node=1", "--dlbundle=auto:"+dir, p.native[1], "first")
	if r.code != 0 || strings.Count(r.out, "staged=no") != 3 || strings.Count(r.out, "arg=first") != 3 {
		t.Fatalf("first step with --dlbundle=auto: exit %d; want 3 native tasks, the traced one too:\n%s", r.code, r.out)
	}
	var imgs []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if imgs, _ = filepath.Glob(filepath.Join(dir, "auto-*.dlimg")); len(imgs) > 0 {
			break
		}
	}
	if len(imgs) != 1 {
		all, _ := filepath.Glob(filepath.Join(dir, "*"))
		var b []byte
		if logs, _ := filepath.Glob(filepath.Join(dir, "*.log")); len(logs) > 0 {
			b, _ = os.ReadFile(logs[0])
		}
		t.Fatalf("no image built in %s after the first step (files: %v)\n%s\n%s", dir, all, b, shared.Logs())
	}
	r = srunDlbundle(t, stage, "-N3", "--ntasks-per-node=2", "--dlbundle=auto:"+dir, p.native[1], "second")
	if r.code != 0 || strings.Count(r.out, "staged=yes") != 6 || strings.Count(r.out, "exe="+p.native[1]+" ") != 6 {
		t.Errorf("second step: exit %d; want 6 tasks from the stage with their own /proc/self/exe:\n%s", r.code, r.out)
	}
	for _, n := range shared.Nodes {
		if s := stagesOn(t, n, stage); len(s) != 1 {
			t.Errorf("%s has stages %v, want one", n, s)
		}
	}
}

// srunBounded runs srun as srunDlbundle does, killed after limit (a step
// the plugin hangs would otherwise hang the test); hung says so.
func srunBounded(t *testing.T, limit time.Duration, stageDir string, args ...string) (r result, hung bool) {
	t.Helper()
	cmd := shared.Command("srun", args...)
	cmd.Env = append(cmd.Env, "DLBUNDLE_STAGE_DIR="+stageDir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { hung = true; cmd.Process.Kill() })
	cmd.Wait()
	timer.Stop()
	return result{out.String(), cmd.ProcessState.ExitCode()}, hung
}

// TestSpankChildBounded: what the plugin runs as dlbundle cannot hang the
// step. A child that writes 100 KiB to stderr before anything else (more
// than a pipe holds) fails the step with its text, escaped (a control
// byte shown as \x01) and cut; a child that never exits is killed at
// plugstack.conf's timeout= and the step fails naming the setting.
func TestSpankChildBounded(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spankchild")
	noisy := filepath.Join(tools, "dlbundle-noisy")
	write(t, noisy, "#!/bin/sh\nprintf 'noisy\\001child\\n' >&2\nhead -c 102400 /dev/zero | tr '\\000' e >&2\nexit 1\n")
	stuck := filepath.Join(tools, "dlbundle-stuck")
	write(t, stuck, "#!/bin/sh\nexec sleep 987654\n")
	os.Chmod(noisy, 0o755)
	os.Chmod(stuck, 0o755)

	restore := plugstackLine(t, "optional", "dlbundle="+noisy)
	r, hung := srunBounded(t, 90*time.Second, "/dev/shm/t-spank-child", "-N3", "--ntasks-per-node=1", "--dlbundle="+p.image[1], p.native[1])
	restore()
	if hung {
		t.Fatalf("a dlbundle writing 100 KiB to stderr first: srun still running after 90 s\n%s", r.out)
	}
	if r.code == 0 || strings.Contains(r.out, "staged=") {
		t.Errorf("a dlbundle that failed: srun exit %d and the tasks ran:\n%s", r.code, r.out)
	}
	if !strings.Contains(r.out, `noisy\x01child`) || strings.Contains(r.out, "noisy\x01") {
		t.Errorf("the child's text is not shown escaped:\n%.2000s", r.out)
	}
	if len(r.out) > 3*8192 {
		t.Errorf("srun's output holds %d bytes of the child's 100 KiB; want it bounded", len(r.out))
	}

	restore = plugstackLine(t, "optional", "dlbundle="+stuck+" timeout=3")
	r, hung = srunBounded(t, 90*time.Second, "/dev/shm/t-spank-child", "-N3", "--ntasks-per-node=1", "--dlbundle="+p.image[1], p.native[1])
	restore()
	if hung {
		t.Fatalf("a dlbundle that never exits, timeout=3: srun still running after 90 s\n%s", r.out)
	}
	if r.code == 0 || strings.Contains(r.out, "staged=") || !strings.Contains(r.out, "timeout=") {
		t.Errorf("a dlbundle killed at the timeout: srun exit %d; want the step failed naming timeout=:\n%s", r.code, r.out)
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 987654").Output(); len(out) > 0 {
		t.Errorf("the child outlived the timeout: pids %s", out)
	}
}

// TestSpankAutoBareCommand: srun --dlbundle=auto:DIR python3 SCRIPT (a
// bare command: srun 22.05 passes it as given, slurmstepd finds it in the
// task's PATH) traces the first step and serves the later ones; another
// script under the same interpreter gets its own image, traced in its own
// first step.
func TestSpankAutoBareCommand(t *testing.T) {
	needSpank(t)
	dir := filepath.Join(shared.Shared, fmt.Sprintf("auto-bare-%d", time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := func(name string) string {
		s := filepath.Join(dir, name+".py")
		write(t, s, fmt.Sprintf("import os\nprint('script=%s staged=' + ('yes' if os.environ.get('DLBUNDLE_STAGE') else 'no'))\n", name))
		return s
	}
	a, b := script("a"), script("b")
	auto := filepath.Join(dir, "images")
	stage := "/dev/shm/t-spank-auto-bare"
	images := func(want int) []string {
		var imgs []string
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if imgs, _ = filepath.Glob(filepath.Join(auto, "auto-*.dlimg")); len(imgs) >= want {
				break
			}
		}
		if len(imgs) != want {
			logs, _ := filepath.Glob(filepath.Join(auto, "*.log"))
			var text []byte
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				text = append(text, b...)
			}
			t.Fatalf("%d images in %s, want %d\n%s\n%s", len(imgs), auto, want, text, shared.Logs())
		}
		return imgs
	}
	step := func(script, name, staged string) {
		t.Helper()
		r := srunDlbundle(t, stage, "-N3", "--ntasks-per-node=1", "--dlbundle=auto:"+auto, "python3", script)
		if want := "script=" + name + " staged=" + staged; r.code != 0 || strings.Count(r.out, want) != 3 {
			t.Fatalf("srun --dlbundle=auto python3 %s: exit %d; want 3 lines %q:\n%s", filepath.Base(script), r.code, want, r.out)
		}
	}
	step(a, "a", "no") // traced
	first := images(1)
	if fi, err := os.Stat(auto); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the auto dir dlbundle made: %v %v; want mode 0700 (it holds traces)", fi.Mode(), err)
	}
	step(a, "a", "yes") // served from a's image
	step(b, "b", "no")  // b has none yet: traced, not served from a's
	both := images(2)
	step(b, "b", "yes")
	if both[0] != first[0] && both[1] != first[0] {
		t.Errorf("a's image %s is gone after b's build: %v", first[0], both)
	}
}

// TestSpankBcast: srun --dlbundle=IMAGE --dlbundle-bcast on 3 nodes x 2
// ranks reads the image from the shared file system once for the step
// (srun's sbcast; slurmd's tree copies it node to node) where the plain
// plugin reads it once per node; each node stages its copy and removes it
// (--consume). plugstack.conf's bcast=1 does the same for every step.
func TestSpankBcast(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spankbcast")
	img := p.image[1]
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	measure := func(name string, args ...string) (opens, bytes uint64) {
		t.Helper()
		sfs.Reset()
		start := time.Now()
		r := srunDlbundle(t, "/dev/shm/t-spank-bcast-"+name, append([]string{"-N3", "--ntasks-per-node=2", "--dlbundle=" + img}, append(args, p.original)...)...)
		if r.code != 0 {
			t.Fatalf("%s: srun exit %d\n%s\n%s", name, r.code, r.out, shared.Logs())
		}
		ranks(t, r.out, 6, 1, p)
		s := sfs.Stats()
		t.Logf("%s: 3 nodes x 2 ranks, %v; shared file system: %d opens, %d reads, %d bytes (image %d bytes)",
			name, time.Since(start).Round(time.Millisecond), s.Open, s.Read, s.BytesRead, st.Size())
		return s.Open, s.BytesRead
	}
	_, plainBytes := measure("plain")
	if plainBytes < 3*uint64(st.Size()) {
		t.Fatalf("without bcast the step read %d bytes; want 3 reads of the %d-byte image, or the count cannot work", plainBytes, st.Size())
	}
	opens, bytes := measure("bcast", "--dlbundle-bcast")
	if opens != 1 || bytes < uint64(st.Size()) || bytes > uint64(st.Size())*3/2 {
		t.Errorf("--dlbundle-bcast: %d opens, %d bytes read of the shared file system; want the %d-byte image opened and read once", opens, bytes, st.Size())
	}
	for _, n := range shared.Nodes {
		if left, _ := shared.OnNode(n, "sh", "-c", "ls /tmp/dlbundle-bcast-* 2>/dev/null").Output(); len(left) != 0 {
			t.Errorf("%s keeps the sbcast copy next to the stage: %s", n, left)
		}
	}
	restore := plugstackLine(t, "required", "bcast=1")
	opens, _ = measure("bcast-default")
	restore()
	if opens != 1 {
		t.Errorf("plugstack.conf bcast=1: the image opened %d times; want once", opens)
	}
}

// TestSpankBcastOncePerJob: a job (salloc) of four srun steps with
// --dlbundle-bcast reads the image from the shared file system once: the
// first step (one node) has sbcast copy it to all 3 nodes of the job, its
// node stages and removes its copy; the later steps (3 nodes x 2 ranks) copy
// nothing, the two other nodes stage the copy they were left and the first
// node finds its stage. A rewritten image is a new copy (a second read),
// two steps started at once copy once, and the job's Epilog (gc --job)
// removes what no step used.
func TestSpankBcastOncePerJob(t *testing.T) {
	needSpank(t)
	p := newProbe(t, "spankbcastjob")
	img := p.image[1]
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	leftovers := func() string {
		var left []string
		for _, n := range shared.Nodes {
			if out, _ := shared.OnNode(n, "sh", "-c", "ls /tmp/dlbundle-bcast-* 2>/dev/null").Output(); len(out) != 0 {
				left = append(left, n+": "+strings.TrimSpace(string(out)))
			}
		}
		return strings.Join(left, "; ")
	}
	if left := leftovers(); left != "" {
		t.Fatalf("copies left by an earlier test: %s", left)
	}
	step := "srun --dlbundle=" + img + " --dlbundle-bcast "
	job := func(name, script string) result {
		t.Helper()
		cmd := shared.Command("salloc", "-N3", "--ntasks-per-node=2", "sh", "-c", script)
		cmd.Env = append(cmd.Env, "DLBUNDLE_STAGE_DIR=/dev/shm/t-spank-bcastjob-"+name)
		return runCmd(t, cmd)
	}
	steps := func(step string) string {
		return "set -e; " + step + "-N1 -n1 " + p.original + "; " +
			step + "-N3 --ntasks-per-node=2 " + p.original + "; " +
			step + "-N3 --ntasks-per-node=2 " + p.original + "; " +
			"echo steps-done"
	}
	// The same job without the broadcast, for the figures beside it.
	sfs.Reset()
	start := time.Now()
	r := job("plain", steps("srun --dlbundle="+img+" "))
	elapsed := time.Since(start)
	s := sfs.Stats()
	if r.code != 0 || !strings.Contains(r.out, "steps-done") {
		t.Fatalf("salloc with 3 steps, no bcast: exit %d\n%s\n%s", r.code, r.out, shared.Logs())
	}
	ranks(t, r.out, 13, 1, p)
	t.Logf("without --dlbundle-bcast: 1 job, 3 steps (1 + 6 + 6 ranks), %v; shared file system: %d opens, %d reads, %d bytes",
		elapsed.Round(time.Millisecond), s.Open, s.Read, s.BytesRead)

	sfs.Reset()
	start = time.Now()
	r = job("once", steps(step))
	elapsed = time.Since(start)
	s = sfs.Stats()
	if r.code != 0 || !strings.Contains(r.out, "steps-done") {
		t.Fatalf("salloc with 3 steps: exit %d\n%s\n%s", r.code, r.out, shared.Logs())
	}
	ranks(t, r.out, 13, 1, p)
	t.Logf("with --dlbundle-bcast: 1 job, 3 steps (1 + 6 + 6 ranks), %v; shared file system: %d opens, %d reads, %d bytes (image %d bytes)",
		elapsed.Round(time.Millisecond), s.Open, s.Read, s.BytesRead, st.Size())
	if s.Open != 1 || s.BytesRead < uint64(st.Size()) || s.BytesRead > uint64(st.Size())*3/2 {
		t.Errorf("--dlbundle-bcast in a job of 3 steps: %d opens, %d bytes read of the shared file system; want the %d-byte image opened and read once per job",
			s.Open, s.BytesRead, st.Size())
	}
	// The Epilog runs when the job has ended, on each node.
	epilogCleans := func() {
		t.Helper()
		var left string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if left = leftovers(); left == "" {
				break
			}
		}
		if left != "" {
			t.Errorf("the job's copies are still on its nodes after its Epilog (dlbundle gc --job): %s", left)
		}
	}
	epilogCleans()

	// The image changed between two steps of one job (its times set, by
	// utimensat, which opens nothing): the second step reads it again (a
	// new copy), it does not reuse the first copy's stage. The second step
	// runs on one node: the others keep the new copy until the Epilog.
	sfs.Reset()
	script := "set -e; " + step + "-N3 -n3 " + p.original + "; python3 -c 'import os,sys; os.utime(sys.argv[1])' " + img + "; " + step + "-N1 -n1 " + p.original + "; echo steps-done"
	r = job("rewritten", script)
	s = sfs.Stats()
	if r.code != 0 || !strings.Contains(r.out, "steps-done") {
		t.Fatalf("salloc, image changed between steps: exit %d\n%s\n%s", r.code, r.out, shared.Logs())
	}
	ranks(t, r.out, 4, 1, p)
	if s.Open != 2 {
		t.Errorf("image changed between the job's 2 steps: opened %d times; want 2 (each version copied once)", s.Open)
	}
	epilogCleans()

	// Two steps started together (srun & srun &) copy once: the second
	// finds the first one's record (here slurmctld's step creation keeps
	// them apart; where their copies overlap, dlbundle's per-job lock
	// makes the second wait for the record).
	sfs.Reset()
	script = "set -e; " + step + "--overlap -N3 -n3 " + p.original + " & " + step + "--overlap -N3 -n3 " + p.original + " & wait; echo steps-done"
	r = job("parallel", script)
	s = sfs.Stats()
	if r.code != 0 || !strings.Contains(r.out, "steps-done") {
		t.Fatalf("salloc, two steps at once: exit %d\n%s\n%s", r.code, r.out, shared.Logs())
	}
	ranks(t, r.out, 6, 1, p)
	if s.Open != 1 {
		t.Errorf("two steps of one job started together: the image opened %d times; want once", s.Open)
	}
	epilogCleans()
}
