package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// One pull per node: when the staging rank fails, the
// ranks that waited for it get its error at once instead of each trying in
// turn (a corrupt image was staged by every rank under the lock; a stalled
// registry cost 4 ranks 90, 181, 272, 362 s).
func TestStageFailureReachesWaitersAtOnce(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	const ranks = 4
	var opens, waiting atomic.Int32
	allWaiting := make(chan struct{})
	req := StageRequest{Dir: dir, Alias: "job-1", Ref: "/images/app.dlimg",
		OnWait: func() {
			if waiting.Add(1) == ranks-1 {
				close(allWaiting)
			}
		},
		Open: func(context.Context) (StageImage, func() error, error) {
			opens.Add(1)
			<-allWaiting // every other rank is blocked on the lock now
			return nil, nil, errors.New("app.dlimg: table of contents digest mismatch (corrupt image)")
		}}
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for i := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Stage(context.Background(), req)
		}()
	}
	wg.Wait()
	if n := opens.Load(); n != 1 {
		t.Errorf("the image was opened %d times on one node, want once", n)
	}
	elsewhere := 0
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "digest mismatch") {
			t.Errorf("rank %d: %v, want the staging rank's error", i, err)
		}
		if errors.Is(err, ErrStagedElsewhere) {
			elsewhere++
		}
	}
	if elsewhere != ranks-1 {
		t.Errorf("%d ranks were told that another process failed, want %d", elsewhere, ranks-1)
	}

	// A later exec that does not wait tries again (the image may be fixed);
	// one of the same launch a moment later takes the failure (below).
	failureReuse = 0
	defer func() { failureReuse = 10 * time.Second }()
	ok := req
	ok.OnWait = nil
	ok.Open = func(context.Context) (StageImage, func() error, error) {
		opens.Add(1)
		return &fileImage{data: []byte("fixed"), files: 1}, func() error { return nil }, nil
	}
	if _, err := Stage(context.Background(), ok); err != nil {
		t.Fatalf("a later stage did not retry the image: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, failedPrefix+"*")); len(m) != 0 {
		t.Errorf("a successful stage left the failure marker %v", m)
	}
}

// A failure recorded before a rank began to wait (an earlier job) is not
// taken as the answer: the rank stages.
func TestStageOldFailureIsRetried(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	marker := failureMarker(dir, "job-1", "/images/app.dlimg")
	if err := writeFailure(dir, marker, errors.New("old failure")); err != nil {
		t.Fatal(err)
	}
	if err := readFailure(marker, time.Now()); err != nil {
		t.Errorf("a failure recorded before the wait began was returned: %v", err)
	}
	if err := readFailure(marker, time.Now().Add(-time.Hour)); err == nil || !strings.Contains(err.Error(), "old failure") {
		t.Errorf("a failure recorded during the wait was not returned: %v", err)
	}
}

// A failure marker or fetch result is read only as a regular file: a FIFO
// at the name is never opened (the read would wait for a writer).
func TestFailureMarkerNeverOpensFIFO(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	real := failureMarker(dir, "job-1", "/images/a.dlimg")
	if err := writeFailure(dir, real, errors.New("a failure")); err != nil {
		t.Fatal(err)
	}
	fifo := failureMarker(dir, "job-1", "/images/b.dlimg")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- readFailure(fifo, time.Now().Add(-time.Hour)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("a FIFO at the marker was read: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("readFailure of a FIFO did not return: it opened the FIFO")
	}
	if err := readFailure(real, time.Now().Add(-time.Hour)); err == nil {
		t.Error("the regular marker beside it was not read")
	}
	if _, ok := readFetched(fifo, time.Now().Add(-time.Hour)); ok {
		t.Error("readFetched read a FIFO")
	}
}

// Waiters block in flock(2) instead of polling: while one rank holds the
// lock, a thread of the waiter sits in the flock system call. Cancelling the
// wait (SIGTERM) returns at once and leaves the lock free for others.
func TestStageLockWaitersBlockInFlock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, stageLockName)
	holder, _, err := lockStage(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waitingc := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		l, waited, err := lockStage(ctx, path, func() { close(waitingc) })
		if err == nil {
			l.unlock()
			if waited.IsZero() {
				err = errors.New("lockStage did not report that it waited")
			}
		}
		res <- err
	}()
	<-waitingc
	blocked := false
	for range 500 { // until the waiting thread has entered the call (bounded)
		if threadsInSyscall(t, unix.SYS_FLOCK) > 0 {
			blocked = true
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if !blocked {
		t.Error("no thread of the waiter is blocked in flock(2): it polls")
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}
	holder.unlock()
	again, _, err := lockStage(context.Background(), path, nil) // the abandoned waiter let go
	if err != nil {
		t.Fatal(err)
	}
	again.unlock()
}

// threadsInSyscall counts this process's threads blocked in system call nr.
func threadsInSyscall(t *testing.T, nr int) int {
	tasks, err := filepath.Glob("/proc/self/task/*/syscall")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range tasks {
		b, _ := os.ReadFile(p)
		if f := strings.Fields(string(b)); len(f) > 0 && f[0] == strconv.Itoa(nr) {
			n++
		}
	}
	return n
}

// The documented epilogue `rm -rf sha256-*` can race a starting exec (issue
// 10 item 7): a stage that lost its shim objects or table is not used, by
// the alias fast path nor under the lock, but staged again.
func TestStageRestagesHalfRemovedStage(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	req := func(alias string) StageRequest {
		return StageRequest{Dir: dir, Alias: alias, MustHave: []string{"f000", "f001"},
			Open: func(context.Context) (StageImage, func() error, error) {
				runs.Add(1)
				return &fileImage{data: []byte("stage me"), files: 2}, func() error { return nil }, nil
			}}
	}
	s, err := Stage(context.Background(), req("job-7"))
	if err != nil {
		t.Fatal(err)
	}
	for _, alias := range []string{"job-7", ""} { // alias fast path, then the locked path
		if err := os.Remove(filepath.Join(s.Dir, "f001")); err != nil {
			t.Fatal(err)
		}
		s2, err := Stage(context.Background(), req(alias))
		if err != nil {
			t.Fatalf("alias %q: %v", alias, err)
		}
		if !s2.Materialized || !hasAll(s2.Dir, []string{"f000", "f001"}) {
			t.Fatalf("alias %q: a half-removed stage was served (materialized %v)", alias, s2.Materialized)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "tmp.*")); len(left) != 0 {
		t.Errorf("moved-aside stages left behind: %v", left)
	}
}

// Regression: a missing or truncated image was opened by 3-4 of 4 ranks per
// node: only the ranks that had waited on the lock took the staging rank's
// error; those that came a moment after it had failed (and released the
// lock) each opened the image again. A rank of the same launch now reuses a
// failure recorded a moment ago, waited or not: a bad image costs one open
// per node. Four ranks of one launch start together under strace, which
// logs every open; the image is opened from its directory's descriptor
// (package trustpath's walk), so its name is what is looked for.
func TestExecBadImageOpenedOncePerNode(t *testing.T) {
	p := clitest.NewProbeImage(t)
	data, err := os.ReadFile(p.Image)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(p.Work, "truncated.dlimg")
	if err := os.WriteFile(truncated, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for i, img := range []string{filepath.Join(p.Work, "missing.dlimg"), truncated} {
		stage := filepath.Join(p.Work, fmt.Sprintf("stage%d", i))
		var wg sync.WaitGroup
		logs := make([]string, 4)
		outs := make([]string, 4)
		for r := range 4 {
			logs[r] = filepath.Join(p.Work, fmt.Sprintf("rank%d-%d.strace", i, r))
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command("strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-e", "signal=none", "-o", logs[r],
					clitest.CLI(t), "exec", "--stage-dir", stage, img, "--", p.Original)
				cmd.Env = append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=88", "SLURM_STEP_ID=0")
				b, _ := cmd.CombinedOutput()
				outs[r] = string(b)
			}()
		}
		wg.Wait()
		opens := 0
		for r := range 4 {
			b, _ := os.ReadFile(logs[r])
			if strings.Contains(string(b), filepath.Base(img)+`"`) {
				opens++
			}
			if !strings.Contains(outs[r], filepath.Base(img)) {
				t.Errorf("%s, rank %d: the error does not name the image:\n%s", filepath.Base(img), r, outs[r])
			}
		}
		if opens != 1 {
			t.Errorf("%s: %d of the 4 ranks of one launch on one node opened it; want one", filepath.Base(img), opens)
			for r := range 4 {
				t.Logf("rank %d: %s", r, outs[r])
			}
		}
	}
}

// A failure outside any batch job is not replayed to the next command run
// by hand (its alias names the image file, not a launch): that command
// opens the image itself, a moment later, and gets its own error.
func TestStageFailureOutsideJobNotReplayed(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	var opens atomic.Int32
	req := StageRequest{Dir: dir, Alias: strings.Repeat("a", 64), Ref: "/images/app.dlimg",
		Open: func(context.Context) (StageImage, func() error, error) {
			opens.Add(1)
			return nil, nil, errors.New("app.dlimg: not a dlbundle image")
		}}
	for i := range 2 {
		_, err := Stage(context.Background(), req)
		if err == nil || errors.Is(err, ErrStagedElsewhere) {
			t.Errorf("command %d outside any job: %v; want its own error, not another process's", i, err)
		}
	}
	if n := opens.Load(); n != 2 {
		t.Errorf("the image was opened %d times by 2 commands outside any job; want 2", n)
	}
	// Inside a job, a rank a moment after the failure takes it (one open).
	req.Alias = "job-5." + strings.Repeat("a", 64)
	Stage(context.Background(), req)
	if _, err := Stage(context.Background(), req); !errors.Is(err, ErrStagedElsewhere) {
		t.Errorf("a rank of the same launch a moment later: %v; want the recorded failure", err)
	}
}

// Plain gc (no --job) removes failure markers too old to answer anyone (a
// finished job's: 13 piled up in an afternoon), and keeps a fresh one.
func TestGCRemovesStaleFailureMarkers(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	old := failureMarker(dir, "job-7."+strings.Repeat("b", 64), "/images/app.dlimg")
	fresh := failureMarker(dir, "job-8."+strings.Repeat("c", 64), "/images/app.dlimg")
	for _, m := range []string{old, fresh} {
		if err := writeFailure(dir, m, errors.New("bad image")); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-2 * staleFailure)
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}
	if _, err := GC(context.Background(), dir, GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err == nil {
		t.Errorf("plain gc left the stale marker %s", filepath.Base(old))
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("plain gc removed a fresh marker: %v", err)
	}
}
