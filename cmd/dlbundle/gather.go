package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/internal/outfile"
	"github.com/dlbundle/dlbundle/internal/trustpath"
)

// gather copies the job's records of this node into Gather/<job>/ (the
// example Epilog runs it as the job's user). Everything goes through the
// door: the records dir as report reads it (checked, the user's own), the
// job dir made by the trust walker (a job dir another user made first in a
// shared directory, job ids being public, is refused), each copy written by
// outfile (a new file renamed into place: a link at the name is replaced,
// never followed).
func (c *ReportCmd) gather() error {
	if c.Gather == "" || c.Job == "" || len(c.Files) > 0 {
		return usageError{"report --gather DIR --job ID copies this node's records of job ID: give both, and no report file"}
	}
	if strings.ContainsAny(c.Job, "/\x00") || c.Job == "." || c.Job == ".." {
		return usageError{fmt.Sprintf("--job %q: a job id has no / in it", c.Job)}
	}
	node := c.Node
	if node == "" {
		node, _ = os.Hostname()
	}
	if strings.ContainsAny(node, "/\x00") {
		return usageError{fmt.Sprintf("--node %q: a node name has no / in it", node)}
	}
	c.RunID = "slurm-" + c.Job
	if err := c.nodeFiles(); err != nil {
		return err
	}
	defer c.records.dir.Close()
	abs, err := abspath.Abs(filepath.Join(c.Gather, c.Job))
	if err != nil {
		return err
	}
	w := &trustpath.Walker{Rule: trustpath.Write, Uid: uint32(os.Geteuid()), Create: true}
	d, err := w.WalkDir(abs)
	if err != nil {
		var refusal *trustpath.Error
		if errors.As(err, &refusal) {
			return fmt.Errorf("--gather: %w; refusing to write the records there: give a directory that is sticky (like /tmp) or yours, where no other user made %s", err, c.Job)
		}
		return fmt.Errorf("--gather: %w", err)
	}
	if d.Node.Uid != uint32(os.Geteuid()) || d.Node.Mode&0o022 != 0 {
		d.Close()
		return fmt.Errorf("--gather: %s is owned by uid %d with mode %#o: not a directory of your own that only you can write; refusing to write the records there", d.Path, d.Node.Uid, d.Node.Mode&0o7777)
	}
	dst := d.Path
	d.Close()
	for _, f := range c.Files {
		to := filepath.Join(dst, node+"."+filepath.Base(f))
		if err := c.gatherOne(f, to); err != nil {
			return err
		}
		// The note naming the run's image goes along: a report of the
		// gathered files then prints a fold that names the image, one that
		// works as printed.
		note := strings.TrimSuffix(f, ".report") + ".image"
		if err := c.gatherOne(note, strings.TrimSuffix(to, ".report")+".image"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (c *ReportCmd) gatherOne(src, dst string) error {
	in, err := c.records.open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := outfile.Create(dst, "gathered record", "--gather")
	if err != nil {
		return err
	}
	if out.Direct() {
		out.Discard()
		return fmt.Errorf("--gather: %s is a device or FIFO; refusing to write a record there", dst)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Discard()
		return fmt.Errorf("--gather: copy %s to %s: %w", src, dst, err)
	}
	return out.Commit(outfile.Private())
}
