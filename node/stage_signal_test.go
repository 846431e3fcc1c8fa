package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// SIGTERM at any moment of exec's staging either ends exec before the app
// starts or reaches the app (once, one that came during the last
// steps was swallowed and the app started anyway). The app records that it
// started and that it got SIGTERM; started without the signal is the bug.
// The signal is sent at 24 points spread over the time one exec takes to
// start the app (bounded: about 24 short runs).
func TestExecSIGTERMDuringStagingNeverStartsApp(t *testing.T) {
	p := clitest.NewProbeImage(t)
	cli := clitest.CLI(t)
	script := `trap 'echo got >> "$0"; exit 0' TERM; echo started >> "$0"; sleep 2 & wait`
	run := func(i int, delay time.Duration) (started, got bool, state *os.ProcessState) {
		log := filepath.Join(p.Work, fmt.Sprintf("app-%d.log", i))
		stage := filepath.Join(p.Work, fmt.Sprintf("stage-%d", i)) // a fresh one: every run stages
		cmd := exec.Command(cli, "exec", "--stage-dir", stage, p.Image, "--", "/bin/sh", "-c", script, log)
		cmd.Env = clitest.CleanEnv(p.Work)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if delay >= 0 {
			time.Sleep(delay)
			cmd.Process.Signal(syscall.SIGTERM)
		} else { // no signal: wait until the app started, then end it
			for i := 0; i < 1000; i++ {
				if b, _ := os.ReadFile(log); strings.Contains(string(b), "started") {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGTERM)
		}
		cmd.Wait()
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "started"), strings.Contains(string(b), "got"), cmd.ProcessState
	}
	t0 := time.Now()
	if started, got, _ := run(-1, -1); !started || !got {
		t.Fatalf("without a signal during staging the app did not run (started %v, got %v)", started, got)
	}
	full := time.Since(t0)
	for i := range 24 {
		delay := full * time.Duration(i) / 24
		started, got, state := run(i, delay)
		if started && !got {
			t.Errorf("SIGTERM %v after exec began: the app started and never got it (swallowed)", delay)
		}
		if !started {
			ws := state.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
				t.Errorf("SIGTERM %v after exec began: exec ended with %v, want death by SIGTERM", delay, state)
			}
		}
	}
}
