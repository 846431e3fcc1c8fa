package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/clitest"
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
		cmd := exec.Command(clitest.CLI(t), append(args, ref, "--", "/bin/sh", "-c", "exit 3")...)
		cmd.Env = append(clitest.CleanEnv(home), "SLURM_JOB_ID="+job)
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

// A slow registry held the node's stage lock for the whole download: the
// same user's exec of another, local image waited on it. The fetch now
// holds a lock of its own reference instead: while rank A's blob is held
// back by the registry, B stages and runs a local image in the same stage
// dir; then A's download completes and A runs too, and nothing of the
// download is left.
func TestFetchDoesNotBlockAnotherImage(t *testing.T) {
	p := clitest.NewProbeImage(t)
	release := make(chan struct{})
	var blobAsked atomic.Bool
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && blobAsked.CompareAndSwap(false, true) {
			select { // held back (no byte: under the stall timeout)
			case <-release:
			case <-time.After(20 * time.Second):
			case <-r.Context().Done():
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ref := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/apps/slow:v1"
	if _, err := registry.Push(context.Background(), p.Image, ref, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	blobAsked.Store(false)
	stage := filepath.Join(p.Work, "stage")
	aDone := make(chan string, 1)
	go func() {
		out, stderr, _, state := clitest.RunCLI(t, append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=51"), "exec", "--stage-dir", stage, "--timeout", "30s", ref, "--", p.Original)
		aDone <- fmt.Sprintf("status %d\n%s%s", state.ExitCode(), out, stderr)
	}()
	for deadline := time.Now().Add(20 * time.Second); !blobAsked.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rank A never asked for the blob")
		}
	}
	bDone := make(chan string, 1)
	go func() {
		out, stderr, _, state := clitest.RunCLI(t, append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=52"), "exec", "--stage-dir", stage, p.Image, "--", p.Original)
		bDone <- fmt.Sprintf("status %d\n%s%s", state.ExitCode(), out, stderr)
	}()
	select {
	case b := <-bDone:
		if !strings.HasPrefix(b, "status 0") || clitest.Field(b, "exe") != p.Original {
			t.Errorf("B's exec of a local image: %s", b)
		}
	case <-time.After(15 * time.Second):
		t.Error("B's exec of a local image waited for A's download (the stage lock is held across the network)")
	}
	close(release)
	if a := <-aDone; !strings.HasPrefix(a, "status 0") || clitest.Field(a, "exe") != p.Original {
		t.Errorf("A's exec of %s: %s", ref, a)
	}
	if left, _ := filepath.Glob(filepath.Join(stage, "fetch-*.dlimg*")); len(left) != 0 {
		t.Errorf("downloads left in the stage dir: %v", left)
	}
}

// Four ranks of one launch exec the same oci:// image at once while the
// registry holds the blob back a moment: one download for the node (the
// others wait on its fetch lock and find the stage), and all run.
func TestFetchOnePullPerNodeConcurrent(t *testing.T) {
	p := clitest.NewProbeImage(t)
	var blobGets atomic.Int32
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			blobGets.Add(1)
			time.Sleep(time.Second)
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ref := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/apps/shared:v1"
	if _, err := registry.Push(context.Background(), p.Image, ref, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	blobGets.Store(0)
	stage := filepath.Join(p.Work, "stage")
	var wg sync.WaitGroup
	outs := make([]string, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, stderr, _, state := clitest.RunCLI(t, append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=53", "SLURM_STEP_ID=0"), "exec", "--stage-dir", stage, ref, "--", p.Original)
			outs[i] = fmt.Sprintf("status %d\n%s%s", state.ExitCode(), out, stderr)
		}()
	}
	wg.Wait()
	for i, o := range outs {
		if !strings.HasPrefix(o, "status 0") || clitest.Field(o, "exe") != p.Original {
			t.Errorf("rank %d: %s", i, o)
		}
	}
	if n := blobGets.Load(); n != 1 {
		t.Errorf("4 ranks of one launch downloaded the blob %d times; want once per node", n)
	}
}
