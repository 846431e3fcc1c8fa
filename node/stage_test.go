package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fileImage is a plain file standing in for an image: its digest is the
// sha256 of its content and it materializes as `files` copies of itself with
// a pause after each, so that a SIGKILL can land in the middle. Each
// Materialize run appends a line to counter, so tests can count stagings
// across processes.
type fileImage struct {
	data    []byte
	files   int
	pause   time.Duration
	counter string
}

func (f *fileImage) Digest() string {
	sum := sha256.Sum256(f.data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (f *fileImage) Materialize(ctx context.Context, dir string) error {
	if f.counter != "" {
		c, err := os.OpenFile(f.counter, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		fmt.Fprintf(c, "%d\n", os.Getpid())
		c.Close()
	}
	for i := range f.files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), f.data, 0o644); err != nil {
			return err
		}
		time.Sleep(f.pause)
	}
	return nil
}

// checkComplete fails unless stage holds every file of img, whole.
func checkComplete(t *testing.T, stage string, files int, data []byte) {
	t.Helper()
	names, err := readStageFiles(stage)
	if err != nil {
		t.Fatalf("published stage %s unreadable: %v", stage, err)
	}
	if len(names) != files {
		t.Fatalf("published stage %s has %d files, want %d: a partial stage is served", stage, len(names), files)
	}
	for _, n := range names {
		got, err := os.ReadFile(filepath.Join(stage, n.Name()))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("published stage file %s is partial (%d of %d bytes, %v)", n.Name(), len(got), len(data), err)
		}
	}
}

// stageFromFile stages the file at path the way exec does: alias first, the
// image opened (and read) only under the lock.
func stageFromFile(ctx context.Context, dir, path, alias string, files int, pause time.Duration, counter string) (*Staged, error) {
	return Stage(ctx, StageRequest{
		Dir:   dir,
		Alias: alias,
		Open: func(context.Context) (StageImage, func() error, error) {
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, nil, err
			}
			return &fileImage{data: data, files: files, pause: pause, counter: counter}, func() error { return nil }, nil
		},
	})
}

// TestStageHelperProcess is not a test: the tests below re-exec the test
// binary into it to get real, killable stager processes.
func TestStageHelperProcess(t *testing.T) {
	if os.Getenv("DLBUNDLE_STAGE_HELPER") != "1" {
		return
	}
	files, _ := strconv.Atoi(os.Getenv("HELPER_FILES"))
	pause, _ := time.ParseDuration(os.Getenv("HELPER_PAUSE"))
	dir, err := OpenStageDir(os.Getenv("HELPER_STAGE_DIR"))
	if err == nil {
		var alias string
		path := os.Getenv("HELPER_IMAGE")
		if alias, err = StageAlias(path, os.Getenv); err == nil {
			var s *Staged
			s, err = stageFromFile(context.Background(), dir, path, alias, files, pause, os.Getenv("HELPER_COUNTER"))
			if err == nil {
				fmt.Println(s.Dir)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	os.Exit(0)
}

type helperSetup struct {
	stageDir, image, counter string
	files                    int
	pause                    time.Duration
	jobID                    string
	data                     []byte
}

func newHelperSetup(t *testing.T, files int, pause time.Duration) *helperSetup {
	tmp := t.TempDir()
	data := bytes.Repeat([]byte("dlbundle stage test\n"), 1000)
	data = append(data, []byte(t.Name())...)
	h := &helperSetup{
		stageDir: filepath.Join(tmp, "stage"),
		image:    filepath.Join(tmp, "app.dlimg"),
		counter:  filepath.Join(tmp, "materialize-runs"),
		files:    files, pause: pause, jobID: "4242", data: data,
	}
	if err := os.WriteFile(h.image, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *helperSetup) command(extraEnv ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStageHelperProcess$")
	cmd.Env = append(os.Environ(),
		"DLBUNDLE_STAGE_HELPER=1",
		"HELPER_STAGE_DIR="+h.stageDir, "HELPER_IMAGE="+h.image, "HELPER_COUNTER="+h.counter,
		"HELPER_FILES="+strconv.Itoa(h.files), "HELPER_PAUSE="+h.pause.String(),
		"SLURM_JOB_ID="+h.jobID, "SLURM_STEP_ID=0") // the ranks of one srun step
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd
}

func (h *helperSetup) materializeRuns(t *testing.T) int {
	b, err := os.ReadFile(h.counter)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// published lists complete stages, temp dirs and aliases in the stage dir.
func (h *helperSetup) published(t *testing.T) (stages, temps []string) {
	stages, _ = filepath.Glob(filepath.Join(h.stageDir, "sha256-*"))
	temps, _ = filepath.Glob(filepath.Join(h.stageDir, "tmp.*"))
	return stages, temps
}

// 32 ranks start at once on a cold node: exactly one stages, all get the
// same complete stage, nothing temporary is left.
func TestStageConcurrentRanksStageOnce(t *testing.T) {
	h := newHelperSetup(t, 8, time.Millisecond)
	const ranks = 32
	outs := make([]string, ranks)
	var wg sync.WaitGroup
	errs := make(chan error, ranks)
	for i := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := h.command().Output()
			if err != nil {
				errs <- fmt.Errorf("rank %d: %v", i, err)
			}
			outs[i] = strings.TrimSpace(string(out))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := h.materializeRuns(t); n != 1 {
		t.Errorf("%d ranks materialized the image; want exactly 1", n)
	}
	stages, temps := h.published(t)
	if len(stages) != 1 || len(temps) != 0 {
		t.Fatalf("stage dir holds stages %v and temp dirs %v; want one stage, no temp dirs", stages, temps)
	}
	for i, o := range outs {
		if o != stages[0] {
			t.Errorf("rank %d used stage %q, want %q", i, o, stages[0])
		}
	}
	checkComplete(t, stages[0], h.files, h.data)
}

// A stager killed with SIGKILL at a random point never leaves a stage that
// is served partial, and the next exec recovers.
func TestStageSIGKILLNeverServesPartial(t *testing.T) {
	for round := range 8 {
		h := newHelperSetup(t, 20, 3*time.Millisecond)
		cmd := h.command()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Spread the kills over start-up, lock, materialize and publish.
		delay := time.Duration(round*12+rand.IntN(12)) * time.Millisecond
		time.Sleep(delay)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		// Whatever is published after the kill is complete.
		stages, temps := h.published(t)
		t.Logf("round %d: killed after %v: %d stage(s), %d temp dir(s), %d materialize run(s)",
			round, delay, len(stages), len(temps), h.materializeRuns(t))
		for _, s := range stages {
			checkComplete(t, s, h.files, h.data)
		}
		if len(stages) == 0 {
			if s := lookupAlias(h.stageDir, mustAlias(t, h), nil); s != nil {
				t.Fatalf("round %d: alias points at %s but no stage is published", round, s.Dir)
			}
		}

		// The next exec (a later rank) recovers: one complete stage, no temp left.
		out, err := h.command().Output()
		if err != nil {
			t.Fatalf("round %d (killed after %v): exec after the kill failed: %v", round, delay, err)
		}
		stages, temps = h.published(t)
		if len(stages) != 1 || len(temps) != 0 || strings.TrimSpace(string(out)) != stages[0] {
			t.Fatalf("round %d (killed after %v): after recovery stages %v temps %v, helper said %q",
				round, delay, stages, temps, out)
		}
		checkComplete(t, stages[0], h.files, h.data)
	}
}

func mustAlias(t *testing.T, h *helperSetup) string {
	alias, err := StageAlias(h.image, func(k string) string {
		if k == "SLURM_JOB_ID" {
			return h.jobID
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	return alias
}

// A failed Materialize publishes nothing and leaves no temp dir.
func TestStageMaterializeErrorPublishesNothing(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	img := &failingImage{}
	_, err = Stage(context.Background(), StageRequest{Dir: dir, Alias: "a",
		Open: func(context.Context) (StageImage, func() error, error) { return img, func() error { return nil }, nil }})
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Stage error = %v; want the Materialize error", err)
	}
	left, _ := os.ReadDir(dir)
	for _, e := range left {
		if e.Name() != stageLockName && !strings.HasPrefix(e.Name(), failedPrefix) { // the marker for waiters
			t.Errorf("after a failed stage, %s is left in the stage dir", e.Name())
		}
	}
}

type failingImage struct{}

func (failingImage) Digest() string { return "sha256:" + strings.Repeat("ab", 32) }
func (failingImage) Materialize(ctx context.Context, dir string) error {
	os.WriteFile(filepath.Join(dir, "half"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, "ro"), 0o500) // removal must cope with read-only dirs
	return fmt.Errorf("write %s: no space left on device", filepath.Join(dir, "half"))
}

// An image whose footer digest is not sha256:<hex> cannot name a path
// outside the stage dir.
func TestStageRefusesMalformedDigest(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"sha256:../../etc", "", "sha256:" + strings.Repeat("A", 64), "md5:abc"} {
		_, err := Stage(context.Background(), StageRequest{Dir: dir,
			Open: func(context.Context) (StageImage, func() error, error) {
				return badDigest(d), func() error { return nil }, nil
			}})
		if err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("digest %q: Stage error = %v; want a refusal", d, err)
		}
	}
}

type badDigest string

func (b badDigest) Digest() string                          { return string(b) }
func (badDigest) Materialize(context.Context, string) error { panic("must not stage") }

// The digest comes from an untrusted image footer: whatever it holds, the
// stage it names is a single plain name inside the stage dir.
func FuzzDigestDirName(f *testing.F) {
	for _, s := range []string{"sha256:" + strings.Repeat("0", 64), "sha256:../..", "", "sha256:" + strings.Repeat("a", 63) + "/"} {
		f.Add(s)
	}
	valid := regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	f.Fuzz(func(t *testing.T, digest string) {
		name, err := digestDirName(digest)
		if want := valid.MatchString(digest); (err == nil) != want {
			t.Fatalf("digest %q: accepted %v, want %v", digest, err == nil, want)
		}
		if err != nil {
			return
		}
		if name != filepath.Base(name) || name == "." || name == ".." || !strings.HasPrefix(name, "sha256-") || len(name) != 71 {
			t.Fatalf("digest %q names stage %q", digest, name)
		}
	})
}

// The stager is killed while other ranks wait for it: one of the waiters
// takes over (its flock succeeds once the kernel drops the dead one's), stages
// from scratch, and every waiter gets the complete stage.
func TestStageWaitersTakeOverFromKilledStager(t *testing.T) {
	h := newHelperSetup(t, 20, 5*time.Millisecond)
	stager := h.command()
	if err := stager.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until it is materializing, then start the waiters.
	for deadline := time.Now().Add(10 * time.Second); h.materializeRuns(t) == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stager never started materializing")
		}
	}
	const waiters = 4
	outs := make([]string, waiters)
	errs := make([]error, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := h.command().Output()
			outs[i], errs[i] = strings.TrimSpace(string(out)), err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	stager.Process.Signal(syscall.SIGKILL)
	stager.Wait()
	wg.Wait()

	stages, temps := h.published(t)
	if len(stages) != 1 || len(temps) != 0 {
		t.Fatalf("stages %v, temp dirs %v; want one stage and none", stages, temps)
	}
	checkComplete(t, stages[0], h.files, h.data)
	for i := range waiters {
		if errs[i] != nil || outs[i] != stages[0] {
			t.Errorf("waiter %d: %v, used %q; want %s", i, errs[i], outs[i], stages[0])
		}
	}
	if n := h.materializeRuns(t); n != 2 {
		t.Errorf("%d materialize runs; want 2 (the killed stager, then one waiter)", n)
	}
}

// OnMiss is called once when the alias names no published stage (the call
// will wait or stage), and not when it does (exec stays on one P then).
func TestStageOnMissOnlyWithoutPublishedStage(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	opened, missed := 0, 0
	req := StageRequest{Dir: dir, Alias: "a", OnMiss: func() { missed++ },
		Open: func(context.Context) (StageImage, func() error, error) {
			opened++
			return &fileImage{data: []byte("x"), files: 1}, func() error { return nil }, nil
		}}
	if _, err := Stage(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if missed != 1 || opened != 1 {
		t.Fatalf("first Stage: OnMiss called %d times, image opened %d times; want 1, 1", missed, opened)
	}
	s, err := Stage(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if missed != 1 || opened != 1 || s.Materialized {
		t.Fatalf("Stage through the alias: OnMiss called %d times in all, image opened %d times; want 1, 1 (no call for a published stage)", missed, opened)
	}
	req.Alias = "b" // another job: the image is read, and the stage reused
	if _, err := Stage(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if missed != 2 {
		t.Fatalf("Stage with an alias not yet written: OnMiss called %d times in all, want 2", missed)
	}
}
