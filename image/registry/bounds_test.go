package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// smallTmpfs mounts a tmpfs of size bytes (root only: the tests run as root).
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s (needs root): %v", size, dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// blobGets counts the blob downloads a registry serves.
func blobGets(n *atomic.Int64, onGet func()) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				n.Add(1)
				if onGet != nil {
					onGet()
				}
			}
			h.ServeHTTP(w, r)
		})
	}
}

// Regression: an oci:// layer streamed into the stage file system with
// no size check first; a 2 GiB declaration filled the tmpfs and was reported
// as "registry unreachable". The layer's declared size is now compared with
// the free space before any download (ENOSPC, both figures named, not one
// blob byte requested), and a write that fails later (the space went to
// someone else) is reported as the write's ENOSPC, not retried.
func TestPullChecksFreeSpaceFirst(t *testing.T) {
	ctx := context.Background()
	var gets atomic.Int64
	var lie atomic.Bool
	var fill func()
	reg := startRegistry(t, func(h http.Handler) http.Handler {
		counted := blobGets(&gets, func() {
			if fill != nil {
				fill()
			}
		})(h)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !lie.Load() || r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
				counted.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			w.Write(make([]byte, 4<<20))
		})
	})
	file, _ := writeImageFile(t, 600<<10)
	ref := reg + "/apps/big:1"
	if _, err := Push(ctx, file, ref, testOptions()); err != nil {
		t.Fatal(err)
	}

	small := smallTmpfs(t, 256<<10)
	gets.Store(0)
	_, err := Fetch(ctx, ref, filepath.Join(small, "x.dlimg"), testOptions())
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "no space left on "+small) ||
		!strings.Contains(err.Error(), "are free") {
		t.Fatalf("Fetch into a 256 KiB tmpfs: %v; want ENOSPC naming the directory and both sizes", err)
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("the refused pull requested %d blobs; want none", n)
	}
	if names := dirNames(t, small); len(names) != 0 {
		t.Errorf("the refused pull left %v", names)
	}

	// Room for the image when checked; gone when the blob starts to arrive.
	room := smallTmpfs(t, 1<<20)
	fill = func() { os.WriteFile(filepath.Join(room, "someone-else"), make([]byte, 900<<10), 0o644) }
	gets.Store(0)
	_, err = Fetch(ctx, ref, filepath.Join(room, "x.dlimg"), testOptions())
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "writing ") {
		t.Fatalf("Fetch into a tmpfs filled meanwhile: %v; want the write's ENOSPC", err)
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("a failed write was retried: %d blob requests", n)
	}
	if names := dirNames(t, room); len(names) != 1 {
		t.Errorf("the failed pull left %v (want only someone-else)", names)
	}

	// A registry that serves more than the manifest declares (4 MiB more)
	// cannot fill the file system: the download stops one byte past the
	// declared size, a digest mismatch.
	fill = nil
	lie.Store(true)
	room2 := smallTmpfs(t, 1<<20)
	_, err = Fetch(ctx, ref, filepath.Join(room2, "x.dlimg"), testOptions())
	if !errors.Is(err, ErrDigestMismatch) || errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Fetch of a blob longer than declared: %v; want ErrDigestMismatch", err)
	}
	if names := dirNames(t, room2); len(names) != 0 {
		t.Errorf("the refused pull left %v", names)
	}
}

// Regression: a blob trickling a byte every 20 s kept every read under
// the stall timeout and held the node's stage lock indefinitely. A download
// must now average a minimum rate over every Timeout window.
func TestPullRefusesTrickle(t *testing.T) {
	var trickle atomic.Bool
	release := make(chan struct{})
	defer close(release)
	reg := startRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if trickle.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				b := rec.Body.Bytes()
				w.Header().Set("Content-Length", strconv.Itoa(len(b)))
				w.WriteHeader(rec.Code)
				for i := range b { // a byte every 50 ms: always under the stall timeout
					if _, err := w.Write(b[i : i+1]); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-release:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	file, _ := writeImageFile(t, 200000)
	ref := reg + "/apps/trickle:1"
	if _, err := Push(context.Background(), file, ref, testOptions()); err != nil {
		t.Fatal(err)
	}
	trickle.Store(true)
	opts := testOptions()
	opts.Timeout = 500 * time.Millisecond
	dir := t.TempDir()
	done := make(chan error, 1)
	go func() {
		_, err := Fetch(context.Background(), ref, filepath.Join(dir, "x.dlimg"), opts)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTooSlow) || !strings.Contains(err.Error(), "below the minimum") {
			t.Errorf("Fetch from a trickling registry = %v, want ErrTooSlow", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Fetch from a trickling registry did not give up (it would hold the stage lock)")
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("the refused pull left %v", names)
	}
}

// A manifest trickled one byte at a time kept every read under the stall
// timeout (the minimum rate applied to blobs only) and held the node's
// stage lock for over 70 s; a 95 MiB manifest took 613 MB. Every response
// but a blob's must now arrive whole within Timeout and weigh at most
// maxSmallResponse.
func TestManifestMustArriveWholeAndSmall(t *testing.T) {
	var mode atomic.Int32 // 1: trickle manifests, 2: oversized manifests
	release := make(chan struct{})
	defer close(release)
	reg := startRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/manifests/") || mode.Load() == 0 {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			b := rec.Body.Bytes()
			w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
			if mode.Load() == 2 { // no Content-Length: the body must be cut while read
				w.WriteHeader(rec.Code)
				pad := make([]byte, 1<<20)
				for i := 0; i < 8; i++ {
					if _, err := w.Write(pad); err != nil {
						return
					}
				}
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.WriteHeader(rec.Code)
			for i := range b { // a byte every 50 ms: always under the stall timeout
				if _, err := w.Write(b[i : i+1]); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-release:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	})
	file, _ := writeImageFile(t, 2000)
	ref := reg + "/apps/slowmanifest:1"
	if _, err := Push(context.Background(), file, ref, testOptions()); err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.Timeout = time.Second
	for _, c := range []struct {
		mode    int32
		want    error
		wantMsg string
	}{
		{1, ErrTooSlow, "did not arrive whole within 1s"},
		{2, ErrTooLarge, "larger than 4194304 bytes"},
	} {
		mode.Store(c.mode)
		start := time.Now()
		_, err := Fetch(context.Background(), ref, filepath.Join(t.TempDir(), "x.dlimg"), opts)
		took := time.Since(start)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.wantMsg) {
			t.Errorf("mode %d: Fetch = %v; want %v saying %q", c.mode, err, c.want, c.wantMsg)
		}
		// Retries included (transient errors only), well under the 70 s
		// the trickle used to take.
		if took > 10*time.Second {
			t.Errorf("mode %d: Fetch took %v", c.mode, took)
		}
	}
}

// Registry error text reached the terminal raw ("\x1b]0;...\x07" retitled
// the window, a newline forged a "staged ok" line) and was replayed to the
// node's other ranks from the failure marker. It is now escaped, whether
// it comes in the registry's JSON errors or as a raw body.
func TestRegistryErrorTextEscaped(t *testing.T) {
	hostile := "\x1b]0;owned\x07\nstaged ok"
	for _, status := range []int{http.StatusNotFound, http.StatusUnauthorized, http.StatusTeapot} {
		reg := startRegistry(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.Contains(r.URL.Path, "/manifests/") {
					h.ServeHTTP(w, r)
					return
				}
				if status == http.StatusTeapot { // not JSON: printed whole
					w.WriteHeader(status)
					w.Write([]byte(hostile))
					return
				}
				msg, _ := json.Marshal(hostile)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				fmt.Fprintf(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":%s}]}`, msg)
			})
		})
		_, err := Fetch(context.Background(), reg+"/apps/x:1", filepath.Join(t.TempDir(), "x.dlimg"), testOptions())
		if err == nil {
			t.Fatalf("HTTP %d: Fetch succeeded", status)
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\x1b\x07\n") || !strings.Contains(msg, `\x1b]0;owned\a\nstaged ok`) {
			t.Errorf("HTTP %d: the registry's text is not escaped: %q", status, msg)
		}
	}
}
