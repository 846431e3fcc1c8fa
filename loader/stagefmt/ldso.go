package stagefmt

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
)

// LdsoChoice is a symlink in a stage, present only when the image's ld.so
// is not the node's (another build id): its text is "<glibc version> <image
// path of the image's ld.so>", and exec starts the app's bundled programs
// under that staged ld.so (docs/exec.md, "Images and nodes"). Absent (the
// same glibc, or an image without ld.so): programs start as always, and the
// check cost the stager two ELF note reads, each exec one failed readlink.
const LdsoChoice = "ldso"

// WriteLdsoChoice compares, at staging, the image's ld.so (the staged file
// the table resolves DynamicLinker to) with the node's, by build id, read as
// data: nothing of the image runs. It writes LdsoChoice when they differ and
// returns a line for the stager to show (""when they are the same).
func WriteLdsoChoice(stageDir string) (string, error) {
	tab, release, err := MapTable(stageDir)
	if err != nil {
		return "", err
	}
	final, ok := ResolveFile(tab, DynamicLinker())
	var libc string
	if ok {
		libc, _ = ResolveFile(tab, filepath.Join(filepath.Dir(final), "libc.so.6"))
	}
	release()
	if !ok || libc == "" {
		return "", nil // no ld.so in the image: the node's runs the node's programs
	}
	tree, err := openStagedTree(filepath.Join(stageDir, RootDir))
	if err != nil {
		return "", err
	}
	defer tree.Close()
	imageID, err := buildIDIn(tree, final)
	if err != nil {
		// Not an ELF object with a build id (a damaged or hostile image):
		// it cannot be the image's ld.so, so nothing is recorded and the
		// node's ld.so runs the programs, as on a node of the same glibc.
		return "", nil
	}
	node, err := os.Open(DynamicLinker())
	if err != nil {
		return "", nil // a node without glibc's ld.so here: nothing to compare with
	}
	nodeID, err := image.BuildID(node)
	node.Close()
	if err != nil || imageID == "" || imageID == nodeID {
		return "", nil
	}
	f, err := tree.open(libc)
	if err != nil {
		return "", err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return "", err
	}
	version, minKernel, err := image.LibcVersion(sizedFile{f, st.Size()})
	f.Close()
	if err != nil || version == "" {
		return "", fmt.Errorf("the image's libc %s: no glibc version found (%v)", libc, err)
	}
	// The image's libc refuses to start on a kernel older than its ABI note
	// says ("FATAL: kernel too old", from inside every process): say so now.
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		if release := unix.ByteSliceToString(uts.Release[:]); KernelOlder(release, minKernel) {
			return "", fmt.Errorf("the image's glibc %s needs Linux %s or later and this node runs %s: "+
				"run it on a newer node, or rebuild the image on a node with an older glibc", version, minKernel, release)
		}
	}
	if err := os.Symlink(version+" "+final, filepath.Join(stageDir, LdsoChoice)); err != nil {
		return "", fmt.Errorf("materialize: record the image's ld.so: %w", err)
	}
	return fmt.Sprintf("the image's glibc %s (ld.so build id %s) is not this node's (%s): its programs run under the image's ld.so", version, imageID, nodeID), nil
}

type sizedFile struct {
	*os.File
	n int64
}

func (f sizedFile) Size() int64 { return f.n }

func buildIDIn(tree *stagedTree, p string) (string, error) {
	f, err := tree.open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return image.BuildID(f)
}

// ImageLdso reads LdsoChoice: the staged path of the image's ld.so and
// whether it takes --argv0 (glibc 2.33 and later); ok false on a node whose
// ld.so is the image's.
func ImageLdso(stageDir string) (staged string, argv0 bool, ok bool) {
	text, err := os.Readlink(filepath.Join(stageDir, LdsoChoice))
	if err != nil {
		return "", false, false
	}
	version, p, found := strings.Cut(text, " ")
	if !found || !strings.HasPrefix(p, "/") {
		return "", false, false
	}
	return filepath.Join(stageDir, RootDir, p), versionAtLeast(version, 2, 33), true
}

func versionAtLeast(v string, major, minor int) bool {
	a, b, _ := strings.Cut(v, ".")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return x > major || x == major && y >= minor
}

// StageGlibc describes the glibc a stage's programs run with, for `dlbundle
// ls`: the image's glibc version and ld.so build id (read as data from the
// staged files) and whether exec starts the image's ld.so on this node
// (LdsoChoice). ok is false for a stage without glibc (no ld.so bundled).
func StageGlibc(stageDir string) (version, buildID string, imageLdso bool, ok bool) {
	tab, release, err := MapTable(stageDir)
	if err != nil {
		return "", "", false, false
	}
	final, found := ResolveFile(tab, DynamicLinker())
	var libc string
	if found {
		libc, _ = ResolveFile(tab, filepath.Join(filepath.Dir(final), "libc.so.6"))
	}
	release()
	if !found {
		return "", "", false, false
	}
	tree, err := openStagedTree(filepath.Join(stageDir, RootDir))
	if err != nil {
		return "", "", false, false
	}
	defer tree.Close()
	buildID, _ = buildIDIn(tree, final)
	if libc != "" {
		if f, err := tree.open(libc); err == nil {
			if st, err := f.Stat(); err == nil {
				version, _, _ = image.LibcVersion(sizedFile{f, st.Size()})
			}
			f.Close()
		}
	}
	_, _, imageLdso = ImageLdso(stageDir)
	return version, buildID, imageLdso, true
}

// KernelOlder reports whether the kernel release (uname -r: "6.1.0-18-amd64")
// is older than min ("3.2.0"); false when either cannot be read.
func KernelOlder(release, min string) bool {
	num := func(s string) ([3]int, bool) {
		var v [3]int
		for i, f := range strings.SplitN(s, ".", 3) {
			end := 0
			for end < len(f) && f[end] >= '0' && f[end] <= '9' {
				end++
			}
			n, err := strconv.Atoi(f[:end])
			if err != nil {
				return v, i > 0
			}
			v[i] = n
		}
		return v, true
	}
	r, ok1 := num(release)
	m, ok2 := num(min)
	if !ok1 || !ok2 || min == "" {
		return false
	}
	for i := range r {
		if r[i] != m[i] {
			return r[i] < m[i]
		}
	}
	return false
}
