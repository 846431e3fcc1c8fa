package materialize

import (
	"fmt"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/untrusted"
)

// An image's ELF objects run on one architecture; a stage of them on another
// makes ld.so print "wrong ELF class" or "cannot be preloaded" lines and the
// app fail or run without the shim. So staging refuses an image built for
// another architecture, with a message that says what to do, before it
// writes anything.

// archReporter is what an image says of its architecture:
// (*image.Image).Arch, the ELF machine of the objects it bundles as uname -m
// spells it, image.ArchAny when it bundles none. A source without it (a
// stage consumed earlier, already checked when it was staged) is not checked.
type archReporter interface{ Arch() string }

// checkImageArch refuses src when it reports an architecture other than
// this node's.
func checkImageArch(src any) error {
	r, ok := src.(archReporter)
	if !ok {
		return nil
	}
	arch, node := r.Arch(), image.HostArch()
	if arch == "" || arch == image.ArchAny || arch == node {
		return nil
	}
	return fmt.Errorf("image is for %s, this node is %s: its programs and libraries cannot run here; "+
		"trace and build the app on %s (natively or emulated: docs/platforms.md), or run it on %s nodes",
		untrusted.Quote(arch), node, node, untrusted.Quote(arch))
}
