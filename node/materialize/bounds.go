package materialize

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/units"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// Staging is bounded by what the image declares: before anything
// is written, Materialize computes from the TOC what the stage will take
// (content, lookup table, inodes) and refuses an image
// whose stage would not fit in the stage directory's file system, or whose
// lookup table would be out of proportion to its declarations (directory
// listings multiplied by long paths: a few KB of compressed TOC asking for
// hundreds of MB of table and as much memory).
const (
	// maxTableSize bounds the lookup table (it is built in memory).
	maxTableSize = 1 << 30
	// tableAmplification and tableSlack bound the table by the declared
	// bytes of its paths and listings (declaredBytes): real images stay
	// under 14x (a 250-byte Spack directory path listing 2-byte names).
	tableAmplification = 32
	tableSlack         = 64 << 20
	// blockSize rounds every file and directory up to a page (tmpfs) or
	// block (ext4, xfs): what it really takes.
	blockSize = 4096
)

// stageCost is what staging an image will write.
type stageCost struct {
	bytes    int64 // content, directories, table, shim
	inodes   int64 // files, directories, symlinks, mirrored directories
	table    int64 // lookup table bytes
	declared int64 // declaredBytes
	mirrored int64 // at most this many mirrored directories (mirrorProbedDirs)
}

// costOf computes the stage cost of entries without building anything.
func costOf(entries []image.Entry) stageCost {
	var c stageCost
	for _, e := range entries {
		c.declared += int64(len(e.Path)+len(e.Target)) + 32 // {"path":"","type":"dir","order":0}
		switch e.Type {
		case image.TypeRegular:
			c.bytes += roundBlock(e.Size)
			c.inodes++
		case image.TypeSymlink:
			c.inodes++
		case image.TypeDir:
			// The directory; its listing is in the table. A listed
			// directory named like a search subdirectory of ld.so may be
			// mirrored (mirrorProbedDirs; the node's own names are known
			// only once its rules are: the names of every glibc count).
			c.bytes += blockSize
			c.inodes++
			for _, d := range e.Listing {
				c.declared += int64(len(d.Name)) + 24 // {"name":"","type":"reg"}
				if d.Type == image.TypeDir && slices.Contains(probedFallback, d.Name) {
					c.mirrored++
				}
			}
		}
	}
	c.bytes += c.mirrored * blockSize
	c.inodes += c.mirrored + 7 // + table, search rules, shim dir, three objects, preload link
	c.table = int64(stagefmt.TableSize(entries))
	c.bytes += roundBlock(c.table) + roundBlock(int64(len(stagefmt.ShimObjects[stagefmt.AuditObject]))) + roundBlock(int64(len(stagefmt.ShimObjects[stagefmt.PreloadObject])))
	return c
}

func roundBlock(n int64) int64 { return (n + blockSize - 1) / blockSize * blockSize }

// checkStageCost refuses an image whose stage would not fit below dir or
// whose table is out of bounds. It runs before anything is written.
func checkStageCost(dir string, entries []image.Entry) error {
	c := costOf(entries)
	if limit := min(int64(maxTableSize), tableAmplification*c.declared+tableSlack); c.table > limit {
		return fmt.Errorf("materialize: the image's lookup table would take %s for %s of declared paths and listings "+
			"(more than %s: directory listings multiplied by long paths); refusing (corrupt or hostile image)",
			units.Bytes(c.table), units.Bytes(c.declared), units.Bytes(limit))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("materialize: statfs %s: %w", dir, err)
	}
	if free := int64(st.Bavail) * st.Bsize; c.bytes > free {
		return fmt.Errorf("materialize: the image needs %s in %s, only %s are free; refusing before writing anything "+
			"(%w); free space there or stage elsewhere with --stage-dir", units.Bytes(c.bytes), dir, units.Bytes(free), unix.ENOSPC)
	}
	if st.Files > 0 && c.inodes > int64(st.Ffree) { // 0: the file system has no inode limit
		return fmt.Errorf("materialize: the image needs up to %d inodes in %s, only %d are free; "+
			"refusing before writing anything (%w); stage elsewhere with --stage-dir", c.inodes, dir, st.Ffree, unix.ENOSPC)
	}
	return nil
}
