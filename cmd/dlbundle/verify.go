package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/dlbundle/dlbundle/image"
)

// Exit statuses of dlbundle verify. 2 is every verb's usage error
// (exitUsage), so stale is 3: a script can tell "rebuild" from "wrong call".
const (
	verifyCorrupt = 1 // also: missing or unreadable
	verifyStale   = 3
)

// VerifyCmd checks an image, or compares it with the file system.
type VerifyCmd struct {
	Image         string `arg:"" help:"Image file (.dlimg)."` // a missing file is a usage error, as for every verb (main's checkArgs)
	AgainstSource bool   `help:"Also compare every bundled path with the file system now (type, size, mtime, content, symlink targets, directory listings, missing paths) and report what is stale: content and missing-file differences first."`
	All           bool   `help:"With --against-source: list every mtime-only and listing difference (default: the first 20 of each)."`
	JSON          bool   `name:"json" help:"Print one JSON object on stdout instead of text: the result (intact, stale), the entry count, the digest and, with --against-source, every difference by group. Errors stay one line on stderr; the exit status is the same."`
}

// verifyResult is what verify --json prints.
type verifyResult struct {
	Image   string `json:"image"`
	Result  string `json:"result"` // "intact", or "stale" (--against-source)
	Entries int    `json:"entries"`
	Digest  string `json:"toc_digest"`
	// Checked is whether the file system was compared (--against-source).
	Checked bool `json:"against_source"`
	// Stale are the differences, what matters first (content and missing
	// files, then mtime only, then directory listings); never cut.
	Stale []staleDiff `json:"stale"`
}

type staleDiff struct {
	Path   string `json:"path"`
	Group  string `json:"group"` // "content", "mtime", "listing"
	Reason string `json:"reason"`
}

// Help is shown by `dlbundle verify --help`.
func (c *VerifyCmd) Help() string {
	return `Checks the image: footer, table of contents and its digest, every frame, every
object's SHA-256, and that the zstd stream is the cpio archive the table of
contents describes.

With --against-source it then compares each path with the file system as it
is now and lists what changed since the build, what matters first: content
and missing-file differences (a library updated, a file gone, a missing path
that now exists, a symlink retargeted), then files whose mtime alone changed,
then directories with new or removed names (a package installed beside the
app's files). Rebuild the image then, from itself, with no pilot:

  dlbundle verify app.dlimg
  dlbundle verify --against-source app.dlimg ||
      dlbundle build -o app.dlimg --from app.dlimg --allow-changed

For a script, --json prints one object (result, entries, toc_digest, and
each stale path with its group: content, mtime or listing):

  dlbundle verify --json --against-source app.dlimg | jq -r '.stale[].path'

Exit status:
  0  the image is intact (and, with --against-source, up to date)
  1  the image is corrupt or unreadable
  2  usage error or no such image (as for every verb): nothing was checked
  3  the image is intact but stale against the file system (--against-source)`
}

// Run verifies the image.
func (c *VerifyCmd) Run() error {
	im, err := image.OpenFile(c.Image)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle verify: %v\n", err)
		verifyExit(verifyCorrupt)
		return nil
	}
	defer im.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := im.Verify(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle verify: %s: %v\n", c.Image, err)
		verifyExit(verifyCorrupt)
		return nil
	}
	res := verifyResult{Image: c.Image, Result: "intact", Entries: len(im.Entries()), Digest: im.TOCDigest(),
		Checked: c.AgainstSource, Stale: []staleDiff{}}
	if !c.JSON {
		fmt.Printf("%s: intact (%d entries, %s)\n", c.Image, len(im.Entries()), im.TOCDigest())
	}
	if !c.AgainstSource {
		return c.printJSON(res)
	}
	// What differs, by how much it matters: content and missing files
	// change what the app reads; an mtime alone changes what Python's .pyc
	// validation sees; a listing change matters only to a lookup of a name
	// the image does not hold.
	var groups [3][]string
	for i := range im.Entries() {
		e := &im.Entries()[i]
		why := staleReason(e)
		if why == "" {
			continue
		}
		g := 0
		switch {
		case strings.HasPrefix(why, "same content, mtime"):
			g = 1
		case strings.HasPrefix(why, "listing changed"):
			g = 2
		}
		groups[g] = append(groups[g], fmt.Sprintf("stale: %s: %s", q(e.Path), why))
		res.Stale = append(res.Stale, staleDiff{Path: e.Path, Group: [3]string{"content", "mtime", "listing"}[g], Reason: why})
	}
	stale := len(groups[0]) + len(groups[1]) + len(groups[2])
	if c.JSON {
		// Groups in the order the text lists them: what matters first.
		sort.SliceStable(res.Stale, func(i, j int) bool {
			return groupRank[res.Stale[i].Group] < groupRank[res.Stale[j].Group]
		})
		if stale > 0 {
			res.Result = "stale"
		}
		if err := c.printJSON(res); err != nil {
			return err
		}
		if stale > 0 {
			verifyExit(verifyStale)
		}
		return nil
	}
	if stale > 0 {
		for g, lines := range groups {
			for i, l := range lines {
				if g > 0 && !c.All && i == 20 {
					fmt.Printf("... and %d more of these (--all lists them)\n", len(lines)-20)
					break
				}
				fmt.Println(l)
			}
		}
		fmt.Printf("%d of %d paths changed since the build: %d content or missing-file, %d mtime only, %d directory listings\n",
			stale, len(im.Entries()), len(groups[0]), len(groups[1]), len(groups[2]))
		fmt.Printf("rebuild the image from itself (no pilot needed): dlbundle build -o %s --from %s --allow-changed\n", c.Image, c.Image)
		verifyExit(verifyStale)
		return nil
	}
	fmt.Printf("up to date with the file system (%d paths checked)\n", len(im.Entries()))
	return nil
}

var groupRank = map[string]int{"content": 0, "mtime": 1, "listing": 2}

// printJSON prints res with --json, else nothing.
func (c *VerifyCmd) printJSON(res verifyResult) error {
	if !c.JSON {
		return nil
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(res)
}

// verifyExit ends dlbundle with a verify status. It exits here rather than
// returning exitError because kong wraps Run's error, which main's type
// assertion does not see through (the message is already printed).
func verifyExit(code int) {
	os.Stdout.Sync()
	os.Exit(code)
}

// staleReason says how path e.Path differs now from what the image recorded,
// or "" when it does not.
func staleReason(e *image.Entry) string {
	fi, err := os.Lstat(e.Path)
	if e.Type == image.TypeMissing {
		if err == nil {
			return "recorded as missing, now exists"
		}
		return ""
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "no longer exists"
		}
		return err.Error()
	}
	switch e.Type {
	case image.TypeExternal:
		return "" // not bundled: lookups go to the file system anyway
	case image.TypeSymlink:
		if fi.Mode()&fs.ModeSymlink == 0 {
			return "was a symlink, now " + fi.Mode().Type().String()
		}
		if t, _ := os.Readlink(e.Path); t != e.Target {
			return fmt.Sprintf("symlink target %s, image has %s", q(t), q(e.Target))
		}
	case image.TypeDir:
		if !fi.IsDir() {
			return "was a directory, now " + fi.Mode().Type().String()
		}
		return listingChange(e)
	case image.TypeRegular:
		if !fi.Mode().IsRegular() {
			return "was a regular file, now " + fi.Mode().Type().String()
		}
		if fi.Size() != e.Size {
			return fmt.Sprintf("size %d, image has %d", fi.Size(), e.Size)
		}
		sum, err := fileDigest(e.Path)
		if err != nil {
			return err.Error()
		}
		if sum != e.SHA256 {
			return "content differs"
		}
		if fi.ModTime().UnixNano() != e.MtimeNS {
			return "same content, mtime differs (Python .pyc validation uses it)"
		}
	}
	return ""
}

func fileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// listingChange compares a directory's names now with the recorded listing.
func listingChange(e *image.Entry) string {
	des, err := os.ReadDir(e.Path)
	if err != nil {
		return err.Error()
	}
	now := map[string]bool{}
	for _, d := range des {
		now[d.Name()] = true
	}
	var added, removed []string
	was := map[string]bool{}
	for _, d := range e.Listing {
		was[d.Name] = true
		if !now[d.Name] {
			removed = append(removed, d.Name)
		}
	}
	for n := range now {
		if !was[n] {
			added = append(added, n)
		}
	}
	if len(added)+len(removed) == 0 {
		return ""
	}
	sort.Strings(added)
	return fmt.Sprintf("listing changed: %d names added %s, %d removed %s", len(added), clip(added), len(removed), clip(removed))
}

// clip lists the first five names, quoted when not printable.
func clip(s []string) string {
	var out []string
	for i, n := range s {
		if i == 5 {
			out = append(out, "...")
			break
		}
		out = append(out, q(n))
	}
	return "[" + strings.Join(out, " ") + "]"
}
