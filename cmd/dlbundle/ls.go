package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/units"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
	"github.com/dlbundle/dlbundle/node"
)

// LsCmd lists the node's stages.
type LsCmd struct {
	StageDir string `name:"stage-dir" placeholder:"DIR" env:"DLBUNDLE_STAGE_DIR" help:"Stage directory (default as for exec)."`
	JSON     bool   `help:"Print one JSON object: the stage dir and its stages (name, image, ref, size, last use, PIDs using it)."`
}

// Help is shown by 'dlbundle ls --help'.
func (c *LsCmd) Help() string {
	return `Lists the stages of this node's stage dir, most recently used first: the
image each was staged from (IMAGE, its file or repository name; REF, the whole
path or oci:// reference), its size on the node, its last use, the
processes using it and the image's glibc (GLIBC: its version, and whether
exec runs its programs under the image's ld.so on this node, "image", or the
node's is the same build, "node"; docs/exec.md, "Images and nodes"). A stage is named after the image's content (sha256-...):
the same image reached by two paths is one stage, and REF is the first path.

  dlbundle ls
  dlbundle ls --json | jq -r '.stages[] | select(.in_use == null) | .name'
  dlbundle gc --stage sha256-4665e2ba2a3d    # remove one stage (not one in use)`
}

type lsStage struct {
	Name    string    `json:"name"`
	Image   string    `json:"image"`
	Ref     string    `json:"ref"`
	Size    int64     `json:"size"`
	LastUse time.Time `json:"last_use"`
	InUse   []int     `json:"in_use"`
	Glibc   *lsGlibc  `json:"glibc"` // null: the image bundles no ld.so
}

// lsGlibc is the image's glibc in a stage and whose ld.so runs its programs
// on this node (docs/exec.md, "Images and nodes").
type lsGlibc struct {
	Version     string `json:"version"`
	LdsoBuildID string `json:"ldso_build_id"`
	Ldso        string `json:"ldso"` // "image": exec starts the image's ld.so here; "node": the node's is the same build
}

// Run lists the stages, most recently used first.
func (c *LsCmd) Run() error {
	// Listing creates nothing: not the stage dir, its parents, nor a
	// fallback for a squatted name.
	dir, squat, found, err := node.LookupStageDirFor(c.StageDir)
	if err != nil {
		return err
	}
	if squat != nil && squat.Fallback != "" {
		fmt.Fprintf(os.Stderr, "dlbundle ls: warning: %s\n", squat.Warning())
	}
	if !found && c.JSON {
		// A script parses an empty listing, not a sentence.
		return c.printJSON(dir, []lsStage{}, 0)
	}
	if !found {
		fmt.Printf("0 stages: no stage dir at %s yet (dlbundle exec or stage creates it)\n", dir)
		return nil
	}
	stages, err := node.ListStages(dir)
	if err != nil {
		return err
	}
	var out []lsStage
	var total int64
	for _, s := range stages {
		ref := node.StageRef(dir, s.Name)
		st := lsStage{Name: s.Name, Image: imageName(ref), Ref: ref, Size: s.Size, LastUse: s.LastUse, InUse: s.InUse}
		if v, id, own, ok := stagefmt.StageGlibc(filepath.Join(dir, s.Name)); ok {
			st.Glibc = &lsGlibc{Version: v, LdsoBuildID: id, Ldso: "node"}
			if own {
				st.Glibc.Ldso = "image"
			}
		}
		out = append(out, st)
		total += s.Size
	}
	if c.JSON {
		if out == nil {
			out = []lsStage{}
		}
		return c.printJSON(dir, out, total)
	}
	fmt.Printf("%-19s %-20s %10s  %-19s  %-13s %-18s %s\n", "STAGE", "IMAGE", "SIZE", "LAST USE", "IN USE BY", "GLIBC", "REF")
	for _, s := range out {
		use := "-"
		if len(s.InUse) > 0 {
			use = fmt.Sprintf("%d processes", len(s.InUse))
		}
		glibc := "-"
		if g := s.Glibc; g != nil {
			glibc = orUnknown(g.Version) + " (" + g.Ldso + " ld.so)"
		}
		fmt.Printf("%-19.19s %-20s %10s  %-19s  %-13s %-18s %s\n", s.Name, orDash(ellipsis(s.Image, 20)), units.Bytes(s.Size),
			s.LastUse.Format(time.DateTime), use, glibc, orDash(printable(s.Ref)))
	}
	fmt.Printf("%d stages, %s in %s\n", len(stages), units.Bytes(total), dir)
	return nil
}

// printJSON prints the listing as ls --json does: one object.
func (c *LsCmd) printJSON(dir string, out []lsStage, total int64) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(struct {
		Dir    string    `json:"stage_dir"`
		Stages []lsStage `json:"stages"`
		Bytes  int64     `json:"bytes"`
	}{dir, out, total})
}

// imageName is what a user calls the image of ref: the file's name, or the
// repository's last part and tag of an oci:// reference.
func imageName(ref string) string {
	if ref == "" {
		return ""
	}
	if registry.IsRef(ref) {
		s := strings.TrimPrefix(ref, registry.Scheme)
		if i := strings.LastIndex(s, "/"); i >= 0 {
			s = s[i+1:]
		}
		if name, digest, ok := strings.Cut(s, "@"); ok {
			return name + "@" + strings.TrimPrefix(digest, "sha256:")[:min(12, len(strings.TrimPrefix(digest, "sha256:")))]
		}
		return s
	}
	return printable(filepath.Base(ref))
}

// printable quotes s if it holds anything that could forge output (a path
// is the user's choice, but a stage dir can be read by root's ls too).
func printable(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

// ellipsis cuts s to n runes in the middle, keeping its start and its end
// (an image's name ends in what tells versions apart).
func ellipsis(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
