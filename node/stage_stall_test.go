package node

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A registry that accepts connections and never answers (a stalled blob
// server): with exec --timeout, the staging rank gives up after its retries,
// and the other ranks of the node get its error at once instead of each
// trying in turn (4 ranks once took 90, 181, 272, 362 s). With
// --fallback they run the app natively. Counted by requests, not by time.
func TestExecStalledRegistryOnePullPerNode(t *testing.T) {
	var requests atomic.Int32
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" { // the API check answers; the image requests stall
			return
		}
		requests.Add(1)
		select { // stall
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer srv.Close()
	defer close(stop)
	ref := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/apps/stalled:v1"
	stage := filepath.Join(t.TempDir(), "stage")
	home := t.TempDir()

	run := func(job string, fallback bool) (code int, stderr string) {
		args := []string{"exec", "--stage-dir", stage, "--insecure", "--timeout", "2s"}
		if fallback {
			args = append(args, "--fallback")
		}
		cmd := exec.Command(dlbundleCLI(t), append(args, ref, "--", "/bin/sh", "-c", "exit 3")...)
		cmd.Env = append(cleanEnv(home), "SLURM_JOB_ID="+job)
		var eb strings.Builder
		cmd.Stderr = &eb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Error(err)
			return -1, ""
		}
		return cmd.ProcessState.ExitCode(), eb.String()
	}

	// Four ranks of one job on the node, with --fallback: rank 0 starts
	// first and stalls (holding the stage lock), then the three others.
	const ranks = 4
	codes, stderrs := make([]int, ranks), make([]string, ranks)
	var wg sync.WaitGroup
	first := make(chan struct{})
	for i := range ranks {
		if i == 1 {
		wait: // until rank 0 is stalled in the registry (or has ended)
			for requests.Load() == 0 {
				select {
				case <-first:
					break wait
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], stderrs[i] = run("2", true)
			if i == 0 {
				close(first)
			}
		}()
	}
	wg.Wait()
	elsewhere := 0
	for i := range ranks {
		if codes[i] != 3 {
			t.Errorf("rank %d: status %d, want 3 (the app run natively, --fallback); stderr %q", i, codes[i], stderrs[i])
		}
		if strings.Contains(stderrs[i], "staging failed in another process") {
			elsewhere++
		} else if !strings.Contains(stderrs[i], "raise --timeout") {
			t.Errorf("rank %d: %q, want the registry timeout error", i, stderrs[i])
		}
	}
	if elsewhere != ranks-1 {
		t.Errorf("%d ranks were told that the staging rank failed, want %d (the others tried the registry again): %q", elsewhere, ranks-1, stderrs)
	}
}
