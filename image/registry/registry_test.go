package registry

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
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

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/dlbundle/dlbundle/image"
)

// The tests run go-containerregistry's registry in-process (a real OCI
// distribution implementation on httptest); 127.0.0.1 is plain http.

// anonymous never reads the host's docker config: tests stay hermetic.
var anonymous = authn.NewMultiKeychain()

func testOptions() Options { return Options{Keychain: anonymous, Timeout: 5 * time.Second} }

func startRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// writeImageFile writes a real .dlimg (image.Write) holding one file of n
// random bytes, so the image is a little larger than n.
func writeImageFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	payload := filepath.Join(dir, "tree", "lib", "payload.so")
	if err := os.MkdirAll(filepath.Dir(payload), 0o755); err != nil {
		t.Fatal(err)
	}
	content := make([]byte, n)
	rand.Read(content)
	if err := os.WriteFile(payload, content, 0o644); err != nil {
		t.Fatal(err)
	}
	var es []image.Entry
	for p := filepath.Dir(payload); p != "/"; p = filepath.Dir(p) {
		es = append([]image.Entry{statEntry(t, p)}, es...)
	}
	es = append(es, statEntry(t, payload))
	for i := range es {
		es[i].Order = i
	}
	p := filepath.Join(dir, "app.dlimg")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = image.Write(f, es, image.WriteOptions{Level: 1, Workers: 1,
		Pilots: []json.RawMessage{json.RawMessage(`{"rec":"header","command":["python3","-c","import numpy"]}`)},
		Build:  map[string]string{"dlbundle": "test", "time": "2026-01-02T03:04:05Z"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

// statEntry is the image entry of a regular file or directory, as a load
// plan would make it.
func statEntry(t *testing.T, p string) image.Entry {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	e := image.Entry{Path: p, Mode: st.Mode, MtimeNS: st.Mtim.Nano(), UID: st.Uid, GID: st.Gid,
		Nlink: uint32(st.Nlink), Dev: st.Dev, Ino: st.Ino}
	if fi.Mode().IsRegular() {
		e.Type, e.Size, e.Kind = image.TypeRegular, fi.Size(), image.KindData
		return e
	}
	e.Type = image.TypeDir
	des, err := os.ReadDir(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range des {
		ty := image.Type("other")
		switch {
		case d.Type().IsRegular():
			ty = image.TypeRegular
		case d.IsDir():
			ty = image.TypeDir
		case d.Type()&os.ModeSymlink != 0:
			ty = image.TypeSymlink
		}
		e.Listing = append(e.Listing, image.DirEntry{Name: d.Name(), Type: ty})
	}
	return e
}

// dirNames lists dir, to prove that a failed fetch left nothing behind.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestPushFetchRoundTrip(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, nil)
	file, want := writeImageFile(t, 3<<20+17)
	ref := "oci://" + reg + "/apps/demo:v1"

	var pushed, total int64
	opts := testOptions()
	opts.Progress = func(done, tot int64) { pushed, total = done, tot }
	d, err := Push(ctx, file, ref, opts)
	if err != nil {
		t.Fatal(err)
	}
	if pushed != int64(len(want)) || total != int64(len(want)) {
		t.Errorf("push progress ended at %d/%d, want %d/%d", pushed, total, len(want), len(want))
	}
	if !strings.HasPrefix(d, "sha256:") || len(d) != 71 {
		t.Fatalf("Push returned digest %q", d)
	}

	resolved, err := Resolve(ctx, ref, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if resolved != d {
		t.Errorf("Resolve = %s, Push returned %s", resolved, d)
	}

	dir := t.TempDir()
	dst := filepath.Join(dir, "got.dlimg")
	var pulled int64
	opts.Progress = func(done, tot int64) { pulled = done }
	fd, err := Fetch(ctx, ref, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	if fd != d {
		t.Errorf("Fetch returned %s, Push %s", fd, d)
	}
	if pulled != int64(len(want)) {
		t.Errorf("pull progress ended at %d, want %d", pulled, len(want))
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("fetched %d bytes differ from the %d pushed", len(got), len(want))
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("fetch left %v in its directory, want only got.dlimg", names)
	}

	// By digest, pinned: the same bytes, no tag involved.
	pinned, err := Pin(ref, d)
	if err != nil {
		t.Fatal(err)
	}
	if pinned != reg+"/apps/demo@"+d {
		t.Errorf("Pin = %q", pinned)
	}
	dst2 := filepath.Join(dir, "bydigest.dlimg")
	if _, err := Fetch(ctx, pinned, dst2, testOptions()); err != nil {
		t.Fatal(err)
	}
	got2, _ := os.ReadFile(dst2)
	if !bytes.Equal(got2, want) {
		t.Error("fetch by digest gave other bytes")
	}
	if r, err := Resolve(ctx, "oci://"+pinned, testOptions()); err != nil || r != d {
		t.Errorf("Resolve(digest ref) = %q, %v; want %s", r, err, d)
	}
}

func TestManifestLayout(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, nil)
	file, want := writeImageFile(t, 1000)
	ref := reg + "/apps/layout:1"
	if _, err := Push(ctx, file, ref, testOptions()); err != nil {
		t.Fatal(err)
	}
	info, err := Inspect(ctx, ref, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		MediaType    string `json:"mediaType"`
		ArtifactType string `json:"artifactType"`
		Config       struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
			Size      int64  `json:"size"`
			Data      []byte `json:"data"`
		} `json:"config"`
		Layers []struct {
			MediaType   string            `json:"mediaType"`
			Size        int64             `json:"size"`
			Annotations map[string]string `json:"annotations"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(info.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.ArtifactType != ArtifactType {
		t.Errorf("manifest mediaType %q artifactType %q", m.MediaType, m.ArtifactType)
	}
	// The OCI empty descriptor, exactly as the image spec defines it.
	if m.Config.MediaType != "application/vnd.oci.empty.v1+json" || m.Config.Size != 2 || string(m.Config.Data) != "{}" ||
		m.Config.Digest != "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" {
		t.Errorf("config descriptor %+v is not the OCI empty descriptor", m.Config)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != string(LayerMediaType) || m.Layers[0].Size != int64(len(want)) ||
		m.Layers[0].Annotations[AnnotationTitle] != "app.dlimg" {
		t.Errorf("layers %+v", m.Layers)
	}
	local, err := image.OpenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	wantAnn := map[string]string{
		AnnotationTitle:        "app.dlimg",
		AnnotationImageSize:    strconv.Itoa(len(want)),
		AnnotationContentSize:  "1000",
		AnnotationEntries:      strconv.Itoa(len(local.Entries())),
		AnnotationTOCDigest:    local.TOCDigest(),
		AnnotationPilotCommand: `["python3","-c","import numpy"]`,
		AnnotationVersion:      "test",
		AnnotationCreated:      "2026-01-02T03:04:05Z",
	}
	for k, v := range wantAnn {
		if info.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, info.Annotations[k], v)
		}
	}
	if info.ImageSize != int64(len(want)) {
		t.Errorf("Inspect ImageSize = %d, want %d", info.ImageSize, len(want))
	}
	// The table of contents, read by range requests, is the local one.
	if info.Image == nil {
		t.Fatalf("Inspect did not open the TOC: %v", info.TOCError)
	}
	if info.TOCDigest != local.TOCDigest() || len(info.Image.Entries()) != len(local.Entries()) {
		t.Errorf("remote TOC %s with %d entries, local %s with %d", info.TOCDigest, len(info.Image.Entries()),
			local.TOCDigest(), len(local.Entries()))
	}
	last := local.Entries()[len(local.Entries())-1]
	if e, ok := info.Image.Lookup(last.Path); !ok || e.SHA256 != last.SHA256 {
		t.Errorf("remote TOC lookup of %s = %+v, %v", last.Path, e, ok)
	}
	// The empty config blob is really in the registry (some registries
	// refuse manifests whose config is missing).
	r, _ := name.ParseReference(ref)
	cfg, err := remote.Layer(r.Context().Digest(m.Config.Digest), remote.WithAuthFromKeychain(anonymous))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfg.Compressed()
	if err != nil {
		t.Fatalf("config blob not pushed: %v", err)
	}
	body, _ := io.ReadAll(rc)
	if string(body) != "{}" {
		t.Errorf("config blob = %q", body)
	}
}

func TestOpenBlobReadsRanges(t *testing.T) {
	ctx := context.Background()
	var ranged atomic.Int32
	reg := startRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && r.Header.Get("Range") != "" {
				ranged.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	file, want := writeImageFile(t, 1<<20)
	ref := reg + "/apps/ranges:1"
	if _, err := Push(ctx, file, ref, testOptions()); err != nil {
		t.Fatal(err)
	}
	b, err := OpenBlob(ctx, ref, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if b.Size() != int64(len(want)) {
		t.Fatalf("Size = %d", b.Size())
	}
	tail := make([]byte, 72)
	if n, err := b.ReadAt(tail, b.Size()-72); err != nil || n != 72 {
		t.Fatalf("ReadAt tail: %d, %v", n, err)
	}
	if !bytes.Equal(tail, want[len(want)-72:]) {
		t.Error("tail bytes differ")
	}
	mid := make([]byte, 4096)
	if _, err := b.ReadAt(mid, 12345); err != nil || !bytes.Equal(mid, want[12345:12345+4096]) {
		t.Errorf("ReadAt middle: %v", err)
	}
	// Past the end: short read and io.EOF, as io.ReaderAt requires.
	over := make([]byte, 100)
	if n, err := b.ReadAt(over, b.Size()-10); n != 10 || err != io.EOF || !bytes.Equal(over[:10], want[len(want)-10:]) {
		t.Errorf("ReadAt over the end: %d, %v", n, err)
	}
	if n := ranged.Load(); n != 3 {
		t.Errorf("%d range requests, want 3 (one per ReadAt)", n)
	}
}

func TestRejectsOtherArtifacts(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, nil)

	// A container image.
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	imgRef, _ := name.ParseReference(reg + "/apps/container:1")
	if err := remote.Write(imgRef, img, remote.WithAuthFromKeychain(anonymous)); err != nil {
		t.Fatal(err)
	}
	// An OCI 1.1 artifact of another type (e.g. a signature or an SBOM).
	file, _ := writeImageFile(t, 100)
	layer, err := newFileLayer(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := artifactManifest(v1.Descriptor{MediaType: LayerMediaType, Size: layer.size, Digest: layer.digest}, nil)
	raw = bytes.Replace(raw, []byte(ArtifactType), []byte("application/vnd.example.sbom.v1"), 1)
	other, _ := name.ParseReference(reg + "/apps/sbom:1")
	if err := remote.WriteLayer(other.Context(), mustLayer(t, layer), remote.WithAuthFromKeychain(anonymous)); err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(other, rawManifest(raw), remote.WithAuthFromKeychain(anonymous)); err != nil {
		t.Fatal(err)
	}

	reason := map[string]string{
		reg + "/apps/container:1": "not an OCI 1.1 artifact",
		reg + "/apps/sbom:1":      `type "application/vnd.example.sbom.v1"`,
	}
	for ref := range reason {
		dir := t.TempDir()
		_, err := Fetch(ctx, ref, filepath.Join(dir, "x.dlimg"), testOptions())
		if !errors.Is(err, ErrNotArtifact) || !strings.Contains(err.Error(), reason[ref]) {
			t.Errorf("Fetch(%s) = %v, want ErrNotArtifact saying %q", ref, err, reason[ref])
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Errorf("Fetch(%s) left %v", ref, names)
		}
		if _, err := Inspect(ctx, ref, testOptions()); !errors.Is(err, ErrNotArtifact) {
			t.Errorf("Inspect(%s) = %v, want ErrNotArtifact", ref, err)
		}
	}
}

func TestMissingTagAndRepository(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, nil)
	file, _ := writeImageFile(t, 100)
	if _, err := Push(ctx, file, reg+"/apps/there:1", testOptions()); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{reg + "/apps/there:2", reg + "/apps/nowhere:1"} {
		dir := t.TempDir()
		_, err := Fetch(ctx, ref, filepath.Join(dir, "x.dlimg"), testOptions())
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), ref) {
			t.Errorf("Fetch(%s) = %v, want ErrNotFound naming the reference", ref, err)
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Errorf("Fetch(%s) left %v", ref, names)
		}
		if _, err := Resolve(ctx, ref, testOptions()); !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%s) = %v, want ErrNotFound", ref, err)
		}
	}
}

// staticKeychain hands out one user's credentials for every registry.
type staticKeychain struct{ user, pass string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return authn.FromConfig(authn.AuthConfig{Username: k.user, Password: k.pass}), nil
}

func TestAuth(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	file, _ := writeImageFile(t, 1000)
	ref := reg + "/apps/private:1"

	for _, kc := range []authn.Keychain{anonymous, staticKeychain{"alice", "wrong"}} {
		opts := testOptions()
		opts.Keychain = kc
		if _, err := Push(ctx, file, ref, opts); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "docker login "+reg) {
			t.Errorf("Push with %v = %v, want ErrDenied with a login hint", kc, err)
		}
		dir := t.TempDir()
		if _, err := Fetch(ctx, ref, filepath.Join(dir, "x"), opts); !errors.Is(err, ErrDenied) {
			t.Errorf("Fetch with %v = %v, want ErrDenied", kc, err)
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Errorf("denied Fetch left %v", names)
		}
	}

	opts := testOptions()
	opts.Keychain = staticKeychain{"alice", "s3cret"}
	d, err := Push(ctx, file, ref, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Fetch(ctx, ref, filepath.Join(t.TempDir(), "x"), opts); err != nil || got != d {
		t.Errorf("Fetch with credentials = %s, %v; want %s", got, err, d)
	}
}

func TestCorruptBlobLeavesNothing(t *testing.T) {
	ctx := context.Background()
	// The registry serves every blob with one byte flipped.
	reg := startRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				b := rec.Body.Bytes()
				if len(b) > 0 {
					b[len(b)/2] ^= 0xff
				}
				for k, v := range rec.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(rec.Code)
				w.Write(b)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	file, _ := writeImageFile(t, 100000)
	ref := reg + "/apps/corrupt:1"
	if _, err := Push(ctx, file, ref, testOptions()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dst := filepath.Join(dir, "x.dlimg")
	_, err := Fetch(ctx, ref, dst, testOptions())
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("Fetch = %v, want ErrDigestMismatch", err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("failed Fetch left %v", names)
	}
}

func TestUnreachableRegistry(t *testing.T) {
	// A port that was just free: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	_, err = Fetch(context.Background(), addr+"/apps/x:1", filepath.Join(dir, "x"), testOptions())
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("Fetch = %v, want ErrUnreachable naming %s", err, addr)
	}
	file, _ := writeImageFile(t, 10)
	if _, err := Push(context.Background(), file, addr+"/apps/x:1", testOptions()); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Push = %v, want ErrUnreachable", err)
	}
}

func TestStalledRegistryTimesOut(t *testing.T) {
	// Accepts connections and never answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	opts := testOptions()
	opts.Timeout = 300 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := Resolve(context.Background(), l.Addr().String()+"/apps/x:1", opts)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrUnreachable) {
			t.Errorf("Resolve = %v, want ErrUnreachable", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Resolve against a silent server did not give up")
	}
}

func TestParseRef(t *testing.T) {
	good := map[string]string{
		"oci://reg.example.org/a/b:v1": "reg.example.org/a/b:v1",
		"reg.example.org:5000/a:v1":    "reg.example.org:5000/a:v1",
		"localhost/a":                  "localhost/a:latest",
		"127.0.0.1:5000/a/b/c":         "127.0.0.1:5000/a/b/c:latest",
		"oci://reg.example.org/a@sha256:" + strings.Repeat("a", 64): "reg.example.org/a@sha256:" + strings.Repeat("a", 64),
	}
	for in, want := range good {
		r, err := parseRef(in, Options{})
		if err != nil {
			t.Errorf("parseRef(%q): %v", in, err)
			continue
		}
		if r.String() != want {
			t.Errorf("parseRef(%q) = %q, want %q", in, r.String(), want)
		}
	}
	for _, in := range []string{"", "oci://", "myapp:v1", "library/myapp:v1", "reg.example.org/A:v1", "reg.example.org/a@sha256:abc"} {
		if _, err := parseRef(in, Options{}); err == nil {
			t.Errorf("parseRef(%q) accepted", in)
		}
	}
	// --insecure is what makes a named lab registry plain http.
	for insecure, scheme := range map[bool]string{false: "https", true: "http"} {
		r, err := parseRef("oci://lab.example.org:5000/a:v1", Options{Insecure: insecure})
		if err != nil || r.Context().Scheme() != scheme {
			t.Errorf("parseRef(Insecure=%v) scheme = %v, %v; want %s", insecure, r, err, scheme)
		}
	}
	if !IsRef("oci://x/y") || IsRef("app.dlimg") {
		t.Error("IsRef")
	}
}

type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

func mustLayer(t *testing.T, l *fileLayer) v1.Layer {
	t.Helper()
	layer, err := partial.CompressedToLayer(l)
	if err != nil {
		t.Fatal(err)
	}
	return layer
}

func TestPushRefusesNonImages(t *testing.T) {
	reg := startRegistry(t, nil)
	p := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(p, []byte("not an image, although long enough to hold a footer: "+strings.Repeat("x", 100)), 0o644)
	_, err := Push(context.Background(), p, reg+"/apps/x:1", testOptions())
	if err == nil || !strings.Contains(err.Error(), "not a dlbundle image") || !strings.Contains(err.Error(), "dlbundle build") {
		t.Errorf("Push of a text file = %v, want a refusal naming dlbundle build", err)
	}
	// Nothing reached the registry.
	if _, err := Resolve(context.Background(), reg+"/apps/x:1", testOptions()); !errors.Is(err, ErrNotFound) {
		t.Errorf("after a refused push, Resolve = %v, want ErrNotFound", err)
	}
}

func TestInspectDetectsReplacedImage(t *testing.T) {
	// A manifest whose TOC annotation does not match the image's footer:
	// the image was swapped under the manifest's description.
	ctx := context.Background()
	reg := startRegistry(t, nil)
	file, _ := writeImageFile(t, 500)
	layer, err := newFileLayer(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := name.ParseReference(reg + "/apps/swapped:1")
	if err := remote.WriteLayer(r.Context(), mustLayer(t, layer), remote.WithAuthFromKeychain(anonymous)); err != nil {
		t.Fatal(err)
	}
	raw, _ := artifactManifest(v1.Descriptor{MediaType: LayerMediaType, Size: layer.size, Digest: layer.digest},
		map[string]string{AnnotationTOCDigest: "sha256:" + strings.Repeat("0", 64)})
	if err := remote.Put(r, rawManifest(raw), remote.WithAuthFromKeychain(anonymous)); err != nil {
		t.Fatal(err)
	}
	if _, err := Inspect(ctx, r.String(), testOptions()); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("Inspect = %v, want ErrDigestMismatch", err)
	}
}

func TestResolveWithoutManifestHEAD(t *testing.T) {
	// Some registries (and proxies) refuse HEAD on manifests; the push
	// needs it, so refusal starts after the push.
	var refuseHead atomic.Bool
	reg := startRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if refuseHead.Load() && r.Method == http.MethodHead && strings.Contains(r.URL.Path, "/manifests/") {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	file, _ := writeImageFile(t, 100)
	d, err := Push(context.Background(), file, reg+"/apps/nohead:1", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	refuseHead.Store(true)
	if got, err := Resolve(context.Background(), reg+"/apps/nohead:1", testOptions()); err != nil || got != d {
		t.Errorf("Resolve = %s, %v; want %s", got, err, d)
	}
}

func TestStalledDownloadTimesOut(t *testing.T) {
	// The registry sends half of every blob, then nothing (a hung storage
	// backend): Fetch must give up in bounded time and leave nothing.
	var stall atomic.Bool
	release := make(chan struct{})
	defer close(release)
	reg := startRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if stall.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				b := rec.Body.Bytes()
				w.Header().Set("Content-Length", strconv.Itoa(len(b)))
				w.WriteHeader(rec.Code)
				w.Write(b[:len(b)/2])
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	file, _ := writeImageFile(t, 200000)
	ref := reg + "/apps/stall:1"
	if _, err := Push(context.Background(), file, ref, testOptions()); err != nil {
		t.Fatal(err)
	}
	stall.Store(true)
	opts := testOptions()
	opts.Timeout = 200 * time.Millisecond
	dir := t.TempDir()
	done := make(chan error, 1)
	go func() {
		_, err := Fetch(context.Background(), ref, filepath.Join(dir, "x.dlimg"), opts)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "stopped answering") {
			t.Errorf("Fetch from a stalled registry = %v, want ErrUnreachable saying it stopped answering", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Fetch from a stalled registry did not give up")
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("stalled Fetch left %v", names)
	}
}
