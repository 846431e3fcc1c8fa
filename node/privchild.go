package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
	"github.com/dlbundle/dlbundle/node/materialize"
)

// The parsing child of StageFor (privileged.go): it runs as the job's user
// and is handed the image as fd 3 (when a file) and the stage dir as fd 4.
// It reads everything that came from outside and writes the stage into the
// tmp.<random> directory root made for it; root publishes what it answers.

// StageChildRequest is what root asks the child (its command line).
type StageChildRequest struct {
	StageDir string // the stage dir root opened (fd 4)
	Tmp      string // tmp.<random> in it: the stage to build (or to remove)
	Remove   bool   // remove Tmp and do nothing else
	// Ensure: stage Ref (an oci:// reference) as the user's own ranks do
	// (Stage: locks, fetch, publish), under Alias; no Tmp.
	Ensure   bool
	Alias    string
	Ref      string // the image as root resolved it (its bytes come from fd 3)
	Workers  int
	Insecure bool
}

const (
	childImageFD = 3
	childDirFD   = 4
)

// RunStageChild is the child's whole life. Before anything else it sets
// no_new_privs and checks that it holds no privilege; its answer goes to out
// as one line, "staged sha256-<hex>" or "exists sha256-<hex>".
func RunStageChild(ctx context.Context, req StageChildRequest, out io.Writer) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	r, e, s := unix.Getresuid()
	if r == 0 || e == 0 || s == 0 || r != e || e != s {
		return fmt.Errorf("the staging child must run as one non-root user (uids %d %d %d): it is started by dlbundle stage --user as root, not by hand", r, e, s)
	}
	var dst, pst unix.Stat_t
	if err := unix.Fstat(childDirFD, &dst); err != nil {
		return fmt.Errorf("stage dir descriptor: %w", err)
	}
	if err := unix.Lstat(req.StageDir, &pst); err != nil || pst.Dev != dst.Dev || pst.Ino != dst.Ino {
		return fmt.Errorf("stage dir %s is not the directory root opened", req.StageDir)
	}
	if req.Ensure {
		if !registry.IsRef(req.Ref) {
			return fmt.Errorf("--ensure is for oci:// references, not %s", req.Ref)
		}
		s, err := Stage(ctx, StageRequest{Dir: req.StageDir, Alias: req.Alias, Ref: req.Ref, MustHave: stagefmt.Essentials,
			Open: OpenImage(req.Ref, req.StageDir, materialize.Options{Workers: req.Workers}, registry.Options{Insecure: req.Insecure})})
		if err != nil {
			return err
		}
		verb := "exists"
		if s.Materialized {
			verb = "staged"
		}
		_, err = fmt.Fprintf(out, "%s %s\n", verb, filepath.Base(s.Dir))
		return err
	}
	if !isTempName(req.Tmp) {
		return fmt.Errorf("%q is not a stage's temporary name", req.Tmp)
	}
	tmp := filepath.Join(req.StageDir, req.Tmp)
	if req.Remove {
		if !isDir(tmp) {
			return nil
		}
		return removeTree(tmp)
	}
	if err := stageChild1(ctx, req, tmp, out); err != nil {
		removeTree(tmp)
		return err
	}
	return nil
}

func stageChild1(ctx context.Context, req StageChildRequest, tmp string, out io.Writer) error {
	if st, err := os.Lstat(tmp); err != nil || !st.IsDir() {
		return fmt.Errorf("the stage's temporary directory %s is missing", tmp)
	}
	opts := materialize.Options{Workers: req.Workers}
	f := os.NewFile(childImageFD, req.Ref)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(childImageFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("image %s: no regular file was handed over", req.Ref)
	}
	im, err := image.OpenWith(f, st.Size, image.OpenOptions{StageDir: req.StageDir})
	if err != nil {
		return fmt.Errorf("%s: %w", req.Ref, err)
	}
	defer im.Close()
	img := imageStage{im: im, opts: opts}
	name, err := digestDirName(img.Digest())
	if err != nil {
		return err
	}
	final := filepath.Join(req.StageDir, name)
	d, err := trustpath.For(trustpath.Private).WalkDir(req.StageDir)
	if err != nil {
		return err
	}
	defer d.Close()
	// Half removed (as Stage does): out of the way, staged again.
	if err := moveAsideIncomplete(d, req.StageDir, name, stagefmt.Essentials); err != nil {
		return err
	}
	if isDir(final) {
		unix.Unlinkat(d.FD, d.Name(filepath.Base(tmp)), unix.AT_REMOVEDIR)
		_, err := fmt.Fprintf(out, "exists %s\n", name)
		return err
	}
	if err := img.Materialize(ctx, tmp); err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return fmt.Errorf("stage image into %s: %w; free space there or stage elsewhere with --stage-dir", req.StageDir, err)
		}
		return fmt.Errorf("stage image into %s: %w", req.StageDir, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	writeStageRef(tmp, req.Ref)
	_, err = fmt.Fprintf(out, "staged %s\n", name)
	return err
}

// isTempName reports whether n is a name makeTempAs gives: tmp.<16 hex>.
func isTempName(n string) bool {
	hex, ok := strings.CutPrefix(n, "tmp.")
	return ok && len(hex) == 16 && strings.Trim(hex, "0123456789abcdef") == ""
}
