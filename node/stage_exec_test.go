package node

// Tests of `dlbundle exec` as a program: the real CLI, a gcc-built probe
// bundled in a real image (written by image.Write) at a path that does NOT
// exist on this machine, so it can only run from the stage.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	mathrand "math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// A bundled executable runs from the stage, as the very process that ran
// dlbundle (no supervisor), with argv[0] and its arguments (even -h) unchanged,
// and its own exit status.
func TestExecRunsBundledExecutableFromStage(t *testing.T) {
	p := clitest.NewProbeImage(t)
	stage := filepath.Join(p.Work, "stage")
	env := clitest.CleanEnv(p.Work)
	out, stderr, pid, state := clitest.RunCLI(t, env, "exec", "--stage-dir", stage, p.Image, "--", p.Original, "exit7", "-h")
	if state.ExitCode() != 7 {
		t.Fatalf("exit status %d, want the app's 7\nstdout: %s\nstderr: %s", state.ExitCode(), out, stderr)
	}
	if got := clitest.Field(out, "argv0"); got != p.Original {
		t.Errorf("argv[0] = %q, want %q unchanged", got, p.Original)
	}
	if got := clitest.Field(out, "pid"); got != strconv.Itoa(pid) {
		t.Errorf("app ran as pid %s, dlbundle was pid %d: a supervisor process stayed behind", got, pid)
	}
	if !strings.Contains(out, "arg=exit7\narg=-h\n") {
		t.Errorf("app's arguments not passed through unchanged: %q", out)
	}
	if got := clitest.Field(out, "exe"); got != p.Original {
		t.Errorf("/proc/self/exe reads %q, want the original path %q", got, p.Original)
	}
}

// Found through PATH: the stage is asked before the file system.
func TestExecFindsBundledCommandInPATH(t *testing.T) {
	p := clitest.NewProbeImage(t)
	env := append(clitest.CleanEnv(p.Work)[1:], "PATH=/nonexistent:"+filepath.Dir(p.Original)+":/usr/bin:/bin")
	out, stderr, _, state := clitest.RunCLI(t, env, "exec", "--stage-dir", filepath.Join(p.Work, "stage"), p.Image, "--", "probe")
	if !state.Success() || clitest.Field(out, "argv0") != "probe" {
		t.Fatalf("exec of a bundled command by name: status %v, stdout %q, stderr %q", state, out, stderr)
	}
}

// Signals are the app's own: the app kills itself with SIGTERM and the
// parent sees exactly that.
func TestExecSignalIsTheApps(t *testing.T) {
	p := clitest.NewProbeImage(t)
	_, stderr, _, state := clitest.RunCLI(t, clitest.CleanEnv(p.Work), "exec", "--stage-dir", filepath.Join(p.Work, "stage"), p.Image, "--", p.Original, "kill")
	ws, ok := state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("app killed by SIGTERM, but the parent saw %v (stderr %q)", state, stderr)
	}
}

// When staging fails, exec fails with a message that names the cause and the
// way out; with --fallback the app runs natively after a warning.
func TestExecStagingFailureAndFallback(t *testing.T) {
	p := clitest.NewProbeImage(t)
	corrupt := filepath.Join(p.Work, "corrupt.dlimg")
	b, err := os.ReadFile(p.Image)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	hostile := filepath.Join(p.Work, "hostile")
	if err := os.Mkdir(hostile, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(hostile, 0o777); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, stageDir, image, want string
	}{
		{"corrupt image", filepath.Join(p.Work, "stage"), corrupt, corrupt},
		{"refused stage dir", hostile, p.Image, "refusing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := clitest.CleanEnv(p.Work)
			out, stderr, _, state := clitest.RunCLI(t, env, "exec", "--stage-dir", c.stageDir, c.image, "--", p.Native, "exit7")
			if state.ExitCode() != 1 || out != "" || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "--fallback") {
				t.Fatalf("without --fallback: status %d, stdout %q, stderr %q; want status 1 and an error naming %q and --fallback",
					state.ExitCode(), out, stderr, c.want)
			}
			out, stderr, _, state = clitest.RunCLI(t, env, "exec", "--fallback", "--stage-dir", c.stageDir, c.image, "--", p.Native, "exit7")
			if state.ExitCode() != 7 || clitest.Field(out, "exe") != p.Native || !strings.Contains(stderr, "warning") {
				t.Fatalf("with --fallback: status %d, stdout %q, stderr %q; want the app run natively (7) after a warning",
					state.ExitCode(), out, stderr)
			}
		})
	}
}

// The rank that stages reads the image; a later rank of the same job step
// (same SLURM_JOB_ID and SLURM_STEP_ID, as srun gives its ranks) makes no
// system call at all on the image path: strace -P lists exactly the calls
// that touch a path. (Without a step, exec runs in the batch script itself
// and stats the image once: TestStageAliasKeys.)
func TestExecLaterRankDoesNotTouchImage(t *testing.T) {
	p := clitest.NewProbeImage(t)
	env := append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=77", "SLURM_STEP_ID=0")
	args := []string{"exec", "--stage-dir", filepath.Join(p.Work, "stage"), p.Image, "--", p.Original}
	traced := func(name string) string {
		log := filepath.Join(p.Work, name)
		cmd := exec.Command("strace", append([]string{"-f", "-qq", "-e", "signal=none", "-P", p.Image, "-o", log, clitest.CLI(t)}, args...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		// strace's own notes are not calls: "+++ superseded by execve +++",
		// and "PID ???( <detached ...>" for a thread that execve ended while
		// strace could not tell its call (so -P could not filter it out).
		var calls []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" && !strings.Contains(l, "+++") && !(strings.Contains(l, " ???(") && strings.HasSuffix(l, "<detached ...>")) {
				calls = append(calls, l)
			}
		}
		return strings.Join(calls, "\n")
	}
	// The image is opened from its directory's descriptor (the trust walk):
	// strace -P sees the calls on the opened file (fstat, pread64), not the
	// openat by name; a later rank that walked to it would show its fstat.
	if first := traced("first.strace"); !strings.Contains(first, "pread64") {
		t.Fatalf("the staging exec shows no read of the image; the check cannot work:\n%s", first)
	}
	if second := traced("second.strace"); second != "" {
		t.Fatalf("a later rank of the job touched the image:\n%s", second)
	}
}

// exec oci://...: only the staging rank pulls the image (from a real
// registry, in process), into the stage dir, and deletes the download.
func TestExecOCIReference(t *testing.T) {
	p := clitest.NewProbeImage(t)
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/apps/probe:v1"
	if _, err := registry.Push(context.Background(), p.Image, ref, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(p.Work, "stage")
	env := append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=78")
	for rank := range 2 {
		out, stderr, _, state := clitest.RunCLI(t, env, "exec", "--stage-dir", stage, ref, "--", p.Original, "exit7")
		if state.ExitCode() != 7 || clitest.Field(out, "argv0") != p.Original {
			t.Fatalf("rank %d: exec %s: status %d, stdout %q, stderr %q", rank, ref, state.ExitCode(), out, stderr)
		}
		if rank == 0 {
			srv.Close() // later ranks must not need the registry
		}
	}
	if left, _ := filepath.Glob(filepath.Join(stage, "tmp.*")); len(left) != 0 {
		t.Errorf("downloads left in the stage dir: %v", left)
	}
}

// 32 ranks of a job exec at once on a cold node: all run the app, one stage
// is published, nothing temporary is left.
func TestExecConcurrentRanksOneStage(t *testing.T) {
	p := clitest.NewProbeImage(t)
	stage := filepath.Join(p.Work, "stage")
	env := append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=79")
	const ranks = 32
	var wg sync.WaitGroup
	errs := make(chan string, ranks)
	for i := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(clitest.CLI(t), "exec", "--stage-dir", stage, p.Image, "--", p.Original, strconv.Itoa(i))
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "arg="+strconv.Itoa(i)+"\n") {
				errs <- fmt.Sprintf("rank %d: %v: %s", i, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	stages, _ := filepath.Glob(filepath.Join(stage, "sha256-*"))
	temps, _ := filepath.Glob(filepath.Join(stage, "tmp.*"))
	if len(stages) != 1 || len(temps) != 0 {
		t.Fatalf("after 32 concurrent execs: stages %v, temp dirs %v; want one stage and none", stages, temps)
	}
}

// --report, --debug and the shim reach the app's environment.
func TestExecSetsShimEnvironment(t *testing.T) {
	p := clitest.NewProbeImage(t)
	stage := filepath.Join(p.Work, "stage")
	report := filepath.Join(p.Work, "report")
	out, stderr, _, state := clitest.RunCLI(t, clitest.CleanEnv(p.Work), "exec", "--stage-dir", stage, "--report", report, "--debug",
		p.Image, "--", "/usr/bin/env")
	if !state.Success() {
		t.Fatalf("exec env: %v: %s", state, stderr)
	}
	stages, _ := filepath.Glob(filepath.Join(stage, "sha256-*"))
	if len(stages) != 1 {
		t.Fatalf("stages %v", stages)
	}
	for _, want := range []string{"DLBUNDLE_REPORT=" + report, "DLBUNDLE_DEBUG=1", "DLBUNDLE_STAGE=" + stages[0],
		"LD_PRELOAD=" + stages[0] + "/", "LD_AUDIT=" + stages[0] + "/"} {
		if !strings.Contains(out, want) {
			t.Errorf("app environment lacks %q:\n%s", want, out)
		}
	}
}

// A command that cannot be run gets a shell's exit status and a message.
func TestExecCommandNotFoundOrNotExecutable(t *testing.T) {
	p := clitest.NewProbeImage(t)
	notExec := filepath.Join(p.Work, "probe.c") // exists, mode 0644
	for _, c := range []struct {
		cmd    string
		status int
	}{{"no-such-command-dlbundle", 127}, {filepath.Join(p.Work, "absent"), 127}, {notExec, 126}} {
		_, stderr, _, state := clitest.RunCLI(t, clitest.CleanEnv(p.Work), "exec", "--stage-dir", filepath.Join(p.Work, "stage"), p.Image, "--", c.cmd)
		if state.ExitCode() != c.status || !strings.Contains(stderr, filepath.Base(c.cmd)) {
			t.Errorf("exec %s: status %d, stderr %q; want %d and a message naming it", c.cmd, state.ExitCode(), stderr, c.status)
		}
	}
}

// SIGKILL of a real `dlbundle exec` while it stages a real image (tens of
// MiB of libraries, real Materialize) never leaves a published stage that
// differs from the image, and the next exec recovers.
func TestExecSIGKILLWhileStaging(t *testing.T) {
	work := t.TempDir()
	img := filepath.Join(work, "libs.dlimg")
	var entries []image.Entry
	var total int64
	libs, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/*.so*")
	for _, l := range libs {
		st, err := os.Lstat(l)
		if err != nil || !st.Mode().IsRegular() || total > 48<<20 {
			continue
		}
		mode := uint32(0o100644)
		if len(entries)%3 == 0 {
			mode = 0o100750 // modes are the image's, whatever the source's
		}
		entries = append(entries, image.Entry{Path: l, Type: image.TypeRegular, Mode: mode, Size: st.Size(),
			MtimeNS: st.ModTime().UnixNano(), Order: len(entries)})
		total += st.Size()
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := image.Write(f, entries, image.WriteOptions{Level: 1}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	im, err := image.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	want := im.Entries()
	im.Close()

	env := append(clitest.CleanEnv(work), "SLURM_JOB_ID=80")
	for round := range 5 {
		stage := filepath.Join(work, fmt.Sprintf("stage%d", round))
		args := []string{"exec", "--stage-dir", stage, img, "--", "/bin/true"}
		cmd := exec.Command(clitest.CLI(t), args...)
		cmd.Env = env
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(round*40+mathrand.IntN(40)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		published := checkStagesMatch(t, stage, want)
		left, _ := filepath.Glob(filepath.Join(stage, "tmp.*"))
		t.Logf("round %d: killed: %d published, %d temp dirs left", round, published, len(left))

		if _, stderr, _, state := clitest.RunCLI(t, env, args...); !state.Success() {
			t.Fatalf("round %d: exec after the kill: %v: %s", round, state, stderr)
		}
		stages := checkStagesMatch(t, stage, want)
		temps, _ := filepath.Glob(filepath.Join(stage, "tmp.*"))
		if stages != 1 || len(temps) != 0 {
			t.Fatalf("round %d: after recovery %d stages and temp dirs %v; want 1 and none", round, stages, temps)
		}
	}
}

// checkStagesMatch fails unless every published stage holds every regular
// entry of the image whole (sha256), with its mode and mtime, and returns how
// many stages there are.
func checkStagesMatch(t *testing.T, stage string, want []image.Entry) int {
	t.Helper()
	stages, _ := filepath.Glob(filepath.Join(stage, "sha256-*"))
	for _, s := range stages {
		for _, e := range want {
			data, err := os.ReadFile(filepath.Join(s, "root", e.Path))
			sum := sha256.Sum256(data)
			if err != nil || hex.EncodeToString(sum[:]) != e.SHA256 {
				t.Fatalf("published stage %s serves %s partial or wrong (%d of %d bytes, %v)", s, e.Path, len(data), e.Size, err)
			}
			// Staged files keep mode and mtime (Python checks .pyc against the source's mtime).
			st, err := os.Stat(filepath.Join(s, "root", e.Path))
			if err != nil || uint32(st.Mode().Perm()) != e.Mode&0o777 || st.ModTime().UnixNano() != e.MtimeNS {
				t.Fatalf("staged %s: mode %v mtime %v; want %#o and %v (%v)", e.Path, st.Mode(), st.ModTime(), e.Mode&0o777, time.Unix(0, e.MtimeNS), err)
			}
		}
	}
	return len(stages)
}

// DLBUNDLE_STAGE_DIR chooses the stage dir as --stage-dir does; the image may
// be given relative to the working directory.
func TestExecStageDirFromEnvironment(t *testing.T) {
	p := clitest.NewProbeImage(t)
	stage := filepath.Join(p.Work, "envstage")
	cmd := exec.Command(clitest.CLI(t), "exec", filepath.Base(p.Image), "--", p.Original)
	cmd.Dir, cmd.Env = p.Work, append(clitest.CleanEnv(p.Work), "DLBUNDLE_STAGE_DIR="+stage)
	out, err := cmd.CombinedOutput()
	if err != nil || clitest.Field(string(out), "argv0") != p.Original {
		t.Fatalf("exec with DLBUNDLE_STAGE_DIR: %v\n%s", err, out)
	}
	if stages, _ := filepath.Glob(filepath.Join(stage, "sha256-*")); len(stages) != 1 {
		t.Fatalf("DLBUNDLE_STAGE_DIR=%s not used: stages there %v", stage, stages)
	}
}
