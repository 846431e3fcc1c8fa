package platform

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// leakCheck makes leaksIn stricter, or says what is by design:
//   - links: the image's symlinks; a path is counted when it leads, through
//     them, to a bundled path (execve("/bin/sh") with /bin -> usr/bin and
//     usr/bin/sh bundled), not only when it is one;
//   - nodeExec: programs that glibc starts through its internal
//     posix_spawn (system() and popen() run /bin/sh so), out of the shim's
//     reach: the kernel runs the node's file under the node's ld.so, which
//     loads the node's glibc objects, by design (docs/exec.md, "Images and
//     nodes"). The calls of such a process, up to its next execve, are not
//     counted.
//   - emulatorInterp: under qemu-user the emulator opens the program's
//     PT_INTERP itself (the guest's ld.so, by the path the program names),
//     which on the architecture's own hardware the kernel loads with no
//     system call of the process: that open is not counted.
type leakCheck struct {
	links          map[string]string
	nodeExec       map[string]bool
	emulatorInterp string
}

// imageLinks are the image's symlinks (path -> target).
func imageLinks(t *testing.T, img string) map[string]string {
	im, err := image.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	m := map[string]string{}
	for _, e := range im.Entries() {
		if e.Type == image.TypeSymlink {
			m[e.Path] = e.Target
		}
	}
	return m
}

// resolveIn follows the image's symlinks along the absolute path p as the
// kernel would in the image's tree (at most 40); components the image does
// not know are kept as they are.
func resolveIn(links map[string]string, p string) string {
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		next := filepath.Join(cur, c)
		if tg, ok := links[next]; ok && hops < 40 {
			hops++
			if !strings.HasPrefix(tg, "/") {
				tg = filepath.Join(cur, tg)
			}
			rest = append(strings.Split(strings.TrimPrefix(filepath.Clean(tg), "/"), "/"), rest...)
			cur = "/"
			continue
		}
		cur = next
	}
	return cur
}

func TestResolveIn(t *testing.T) {
	links := map[string]string{"/bin": "usr/bin", "/usr/bin/sh": "dash", "/lib64/ld.so": "/lib/x/ld-2.so", "/lib": "usr/lib", "/a": "/a"}
	for in, want := range map[string]string{
		"/bin/sh":         "/usr/bin/dash",
		"/lib64/ld.so":    "/usr/lib/x/ld-2.so",
		"/usr/bin/python": "/usr/bin/python",
		"/a/b":            "/a/b", // a loop: given up after 40 hops
	} {
		if got := resolveIn(links, in); got != want {
			t.Errorf("resolveIn(%q) = %q, want %q", in, got, want)
		}
	}
}
