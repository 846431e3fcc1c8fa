package loader

import (
	"fmt"
	"runtime"
	"strings"
)

// An image's ELF objects run on one architecture; a stage of them on another
// makes ld.so print "wrong ELF class" or "cannot be preloaded" lines and the
// app fail or run without the shim. So staging refuses an image built for
// another architecture, with a message that says what to do, before it
// writes anything.

// archReporter is what an image says of its architecture:
// (*image.Image).Arch, the ELF machine of the objects it bundles, "any" when
// it bundles none (issue 20, the format's part). A reader without it is
// not checked (ld.so decides, as before).
type archReporter interface{ Arch() string }

// checkImageArch refuses src when it reports an architecture other than
// this node's.
func checkImageArch(src any) error {
	r, ok := src.(archReporter)
	if !ok {
		return nil
	}
	arch := strings.TrimSpace(r.Arch())
	if arch == "" || arch == "any" {
		return nil
	}
	for _, a := range strings.FieldsFunc(arch, func(c rune) bool { return c == ',' || c == '+' || c == ' ' }) {
		if goArch(a) == runtime.GOARCH {
			return nil
		}
	}
	return fmt.Errorf("image is for %s, this node is linux/%s: its programs and libraries cannot run here; "+
		"trace and build the app on a %s node (or an emulated one: docs/platforms.md), or run it on %s nodes",
		arch, runtime.GOARCH, runtime.GOARCH, arch)
}

// goArch names an architecture as GOARCH does, whichever spelling the image
// uses (ELF's EM_X86_64 and EM_AARCH64, the kernel's x86_64 and aarch64,
// Debian's amd64 and arm64).
func goArch(a string) string {
	switch strings.ToLower(a) {
	case "amd64", "x86_64", "x86-64", "em_x86_64":
		return "amd64"
	case "arm64", "aarch64", "em_aarch64":
		return "arm64"
	}
	return strings.ToLower(a)
}
