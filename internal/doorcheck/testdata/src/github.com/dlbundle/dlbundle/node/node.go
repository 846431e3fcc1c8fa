package node

import (
	"os"
	"syscall"
)

const atFDCWD = -100

func planted(p string) {
	os.ReadFile(p)                 // want `node.go:\d+: os.ReadFile of a non-constant path in node.planted, outside the trust door: use trustpath.\(\*Walker\).OpenFile`
	os.OpenFile(p, os.O_RDONLY, 0) // want `os.OpenFile of a non-constant path`
	os.MkdirAll(p+"/x", 0o755)     // want `os.MkdirAll .*trustpath.Walker\{Create: true\}`
	os.Rename("/tmp/a", p)         // want `os.Rename`
	syscall.Open(p, 0, 0)          // want `syscall.Open`
	syscall.Unlink(p)              // want `syscall.Unlink`
	func() {
		os.ReadDir(p) // want `os.ReadDir of a non-constant path in node.planted`
	}()
}

type T struct{}

func (T) method(p string) {
	os.Remove(p) // want `os.Remove of a non-constant path in node.T.method`
}

func notReported(dirfd int, name string, f *os.File) {
	os.ReadFile("/proc/self/status")             // a constant path
	syscall.Openat(dirfd, name, 0, 0)            // fd-relative: the door's own technique
	syscall.Openat(atFDCWD, "/etc/passwd", 0, 0) // constant
	f.ReadDir(-1)                                // a method on a descriptor already open
}

func cwdRelative(name string) {
	syscall.Openat(atFDCWD, name, 0, 0) // want `syscall.Openat of a non-constant path`
}

// ownInput is allowlisted by the test (as allow.go would).
func ownInput(p string) {
	os.ReadFile(p)
	func() { os.Open(p) }()
}
