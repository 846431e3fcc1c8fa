package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/units"
	"github.com/dlbundle/dlbundle/internal/untrusted"
)

// Image is an opened, validated image. Its methods are safe for concurrent use.
type Image struct {
	r       io.ReaderAt
	closer  io.Closer
	size    int64
	digest  string
	toc     toc
	byPath  []int32       // entry indexes sorted by path: Lookup and the uniqueness checks
	owner   []int         // per entry: index of the entry whose cpio header starts its frames (-1: none)
	sharers map[int][]int // owner -> every entry sharing its frames (owner first)
	objects []int         // owners in file order (the objects' order)
	dec     *zstd.Decoder
	dataEnd int64

	meta     []byte // the TOC's meta area, parsed by Pilots and BuildInfo
	metaOnce sync.Once
}

// tailRead is how much of an image's end Open reads first: the footer, the
// TOC header and, for most images, the whole TOC (numpy's is 94 KB, torch's
// 285 KB).
const tailRead = 256 << 10

// maxFrameRatio is the most a zstd frame can expand (128 KiB per 4-byte RLE
// block); a legitimate frame of zeros reaches about 30,000 (level 19).
const maxFrameRatio = 1 << 15

// OpenOptions tune OpenWith and OpenFileWith.
type OpenOptions struct {
	// StageDir, when set, is where the image will be staged: its file
	// system's free inodes and bytes (statfs) bound what the TOC may
	// declare, checked on the TOC header before the body is read (an image
	// that cannot be staged there is refused with ENOSPC at once, in
	// constant memory; docs/SPEC.md 3.2).
	StageDir string
}

// OpenFile opens and validates the image at path; Close closes the file.
func OpenFile(p string) (*Image, error) { return OpenFileWith(p, OpenOptions{}) }

// OpenFileWith is OpenFile with options.
func OpenFileWith(p string, opts OpenOptions) (*Image, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	im, err := OpenWith(f, fi.Size(), opts)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	im.closer = f
	return im, nil
}

// ReadError wraps a failure of the reader itself (I/O, a registry that does
// not serve byte ranges), as opposed to an image that is corrupt.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// Open validates the footer, the TOC digest and every entry of the image in r.
func Open(r io.ReaderAt, size int64) (*Image, error) { return OpenWith(r, size, OpenOptions{}) }

// OpenWith is Open with options. What it reads and allocates is bounded by
// the TOC header's declarations, which are checked against fixed limits
// (and the stage's capacity) before the body is read (docs/SPEC.md 3.2).
func OpenWith(r io.ReaderAt, size int64, opts OpenOptions) (*Image, error) {
	if size < footerSize {
		return nil, fmt.Errorf("not a dlbundle image: %d bytes is shorter than the %d-byte footer (truncated?)", size, footerSize)
	}
	// One read of the file's tail holds the footer, the TOC header and, for
	// most images, the whole TOC (one range request from a registry); the
	// TOC header is checked against the limits before anything larger is
	// read or allocated.
	tailLen := min(size, tailRead)
	tail := make([]byte, tailLen)
	if _, err := r.ReadAt(tail, size-tailLen); err != nil {
		return nil, fmt.Errorf("reading image footer: %w", &ReadError{err})
	}
	ft, err := parseFooter(tail[tailLen-footerSize:], size)
	if err != nil {
		return nil, err
	}
	hdrEnd := ft.TOCOffset + skippableHeaderSize + tocHeaderSize
	var hb []byte
	if ft.TOCOffset >= size-tailLen {
		hb = tail[ft.TOCOffset-(size-tailLen)+skippableHeaderSize:][:tocHeaderSize]
	} else {
		hb = make([]byte, tocHeaderSize)
		if _, err := r.ReadAt(hb, hdrEnd-tocHeaderSize); err != nil {
			return nil, fmt.Errorf("reading table of contents: %w", &ReadError{err})
		}
	}
	// The header is not authenticated yet (the digest covers the whole
	// frame): it may only make the reader refuse, never read more.
	h, err := parseTOCHeader(hb, ft.TOCOffset)
	if err != nil {
		return nil, err
	}
	if opts.StageDir != "" {
		if err := checkCapacity(&h, opts.StageDir); err != nil {
			return nil, err
		}
	}
	var frame []byte
	if ft.TOCOffset >= size-tailLen {
		frame = tail[ft.TOCOffset-(size-tailLen):][:ft.TOCLength]
	} else {
		frame = make([]byte, ft.TOCLength)
		if _, err := r.ReadAt(frame, ft.TOCOffset); err != nil {
			return nil, fmt.Errorf("reading table of contents: %w", &ReadError{err})
		}
	}
	var fh skippableRec
	fh.get(frame)
	if fh.Magic != tocFrameMagic || int64(fh.Size) != ft.TOCLength-skippableHeaderSize {
		return nil, fmt.Errorf("no table-of-contents frame at offset %d (corrupt image)", ft.TOCOffset)
	}
	payload := frame[skippableHeaderSize:]
	if sum := sha256.Sum256(payload); !bytes.Equal(sum[:], ft.TOCSHA256[:]) {
		return nil, fmt.Errorf("table of contents digest mismatch: footer says sha256:%x, content is sha256:%x (corrupt image)", ft.TOCSHA256, sum)
	}
	if !bytes.Equal(hb, payload[:tocHeaderSize]) { // read twice, and the file changed between
		return nil, fmt.Errorf("table-of-contents header changed while it was read (image rewritten meanwhile?)")
	}
	body, err := decodeBody(payload[tocHeaderSize:], h.BodySize)
	if err != nil {
		return nil, err
	}
	im := &Image{r: r, size: size, digest: "sha256:" + hex.EncodeToString(ft.TOCSHA256[:]), dataEnd: ft.TOCOffset}
	if err := im.load(&h, body); err != nil {
		return nil, err
	}
	// Content frames are decoded into buffers of exactly the expected size
	// (WithDecodeAllCapLimit), so a hostile frame cannot inflate further.
	im.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(maxFrameContent+64<<10), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, err
	}
	return im, nil
}

// decodeBody decompresses the TOC body into a buffer of exactly the
// declared size: more output is an error, not an allocation.
func decodeBody(comp []byte, size uint64) ([]byte, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(max(size+1, 8<<20)),
		zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	body, err := dec.DecodeAll(comp, make([]byte, 0, size))
	if err != nil {
		return nil, fmt.Errorf("decompressing table of contents: %v (corrupt image)", err)
	}
	if uint64(len(body)) != size {
		return nil, fmt.Errorf("table of contents decompresses to %d bytes, its header says %d (corrupt image)", len(body), size)
	}
	return body, nil
}

// dirBlock is what a staged directory takes at least (a page on tmpfs, a
// block on ext4 and xfs), as loader's stage cost counts it.
const dirBlock = 4096

// checkCapacity refuses, from the TOC header alone, an image that cannot be
// staged in dir: every reg, dir and symlink entry becomes an inode, the
// stage holds every file's bytes, and its lookup table every path and name.
func checkCapacity(h *tocHeader, dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	inodes := uint64(h.ByType[0]) + uint64(h.ByType[1]) + uint64(h.ByType[2])
	if st.Files > 0 && inodes > st.Ffree { // Files 0: no inode limit (btrfs)
		return fmt.Errorf("no free inodes left for this image on %s: its table of contents declares %d files, directories and symlinks, %d inodes are free; refusing before reading it (%w); stage elsewhere with --stage-dir",
			dir, inodes, st.Ffree, unix.ENOSPC)
	}
	// A directory takes a block wherever it is staged (the loader's cost
	// check counts it the same way after decoding): counted here, a
	// million empty directories are refused before their records are.
	need := h.FileBytes + uint64(h.StringsSize) + uint64(h.ByType[1])*dirBlock
	if free := st.Bavail * uint64(st.Bsize); need > free {
		return fmt.Errorf("no space left on %s: the image's table of contents declares %s of files, directories and paths, %s are free; refusing before reading it (%w); free space there or stage elsewhere with --stage-dir",
			dir, units.Bytes(int64(min(need, math.MaxInt64))), units.Bytes(int64(min(free, math.MaxInt64))), unix.ENOSPC)
	}
	return nil
}

// load decodes and validates the TOC body.
func (im *Image) load(h *tocHeader, body []byte) error {
	d, err := decodeTOC(h, body)
	if err != nil {
		return err
	}
	im.toc = d.toc
	im.meta = d.meta
	if !json.Valid(im.meta) && len(im.meta) > 0 {
		return fmt.Errorf("table of contents: build information is not valid JSON (corrupt image)")
	}
	if err := im.checkEntries(); err != nil {
		return err
	}
	im.owner = make([]int, len(im.toc.Entries))
	im.sharers = make(map[int][]int, len(d.objOwner))
	im.objects = d.objOwner
	for i := range im.owner {
		im.owner[i] = -1
		if o := d.objOf[i]; o != noObject {
			own := d.objOwner[o]
			im.owner[i] = own
			im.sharers[own] = append(im.sharers[own], i)
		}
	}
	return nil
}

// checkEntries checks each entry and the rules between entries: unique
// paths, nothing below a non-directory, unique listed names. Paths are
// sorted once (4 bytes per entry); a descendant of X is found by a binary
// search for X + "/", never by walking each path's parents (a 3,000-byte
// path of 1,500 components would otherwise cost 1,500 lookups).
func (im *Image) checkEntries() error {
	es := im.toc.Entries
	for i := range es {
		if err := checkEntry(&es[i]); err != nil {
			return fmt.Errorf("entry %d (%s): %v", i, quote(es[i].Path), err)
		}
	}
	im.byPath = make([]int32, len(es))
	for i := range im.byPath {
		im.byPath[i] = int32(i)
	}
	slices.SortFunc(im.byPath, func(a, b int32) int { return strings.Compare(es[a].Path, es[b].Path) })
	for k := 1; k < len(im.byPath); k++ {
		if a, b := im.byPath[k-1], im.byPath[k]; es[a].Path == es[b].Path {
			return fmt.Errorf("entry %d: path %s appears twice (also entry %d)", max(a, b), quote(es[a].Path), min(a, b))
		}
	}
	for k, i := range im.byPath {
		x := &es[i]
		if x.Type == TypeDir {
			continue
		}
		// The first path >= x.Path+"/" is below x if anything is.
		j := k + sort.Search(len(im.byPath)-k, func(j int) bool { return compareChild(es[im.byPath[k+j]].Path, x.Path) >= 0 })
		if j < len(im.byPath) {
			if p := es[im.byPath[j]].Path; len(p) > len(x.Path) && p[len(x.Path)] == '/' && strings.HasPrefix(p, x.Path) {
				return fmt.Errorf("entry %s lies below %s, which is a %s, not a directory", quote(p), quote(x.Path), x.Type)
			}
		}
	}
	var scratch []int32
	for i := range es {
		if l := es[i].Listing; len(l) > 1 {
			scratch = scratch[:0]
			for k := range l {
				scratch = append(scratch, int32(k))
			}
			slices.SortFunc(scratch, func(a, b int32) int { return strings.Compare(l[a].Name, l[b].Name) })
			for k := 1; k < len(scratch); k++ {
				if l[scratch[k-1]].Name == l[scratch[k]].Name {
					return fmt.Errorf("entry %d (%s): listing names %s twice", i, quote(es[i].Path), quote(l[scratch[k]].Name))
				}
			}
		}
	}
	return nil
}

// compareChild compares p with dir + "/" without building that string.
func compareChild(p, dir string) int {
	n := min(len(p), len(dir))
	if c := strings.Compare(p[:n], dir[:n]); c != 0 {
		return c
	}
	if len(p) < len(dir) {
		return -1
	}
	if len(p) == len(dir) { // p == dir < dir+"/"
		return -1
	}
	return int(p[len(dir)]) - '/'
}

// checkPath accepts absolute, lexically clean paths without NUL, at most
// MaxPathLen bytes.
func checkPath(p string) error {
	if p == "" || p[0] != '/' {
		return fmt.Errorf("path %s is not absolute", quote(p))
	}
	if len(p) > MaxPathLen {
		return fmt.Errorf("path of %d bytes is longer than the %d an image holds (docs/SPEC.md 1.3)", len(p), MaxPathLen)
	}
	if path.Clean(p) != p {
		return fmt.Errorf("path %s is not clean (no //, . or .. components, no trailing /)", quote(p))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("path %s holds a NUL byte", quote(p))
	}
	return nil
}

// checkEntry checks what decodeTOC did not: the path's form, the mode's
// type bits, and the names and types of a listing.
func checkEntry(e *Entry) error {
	if err := checkPath(e.Path); err != nil {
		return err
	}
	if e.Path == "/" && e.Type != TypeDir {
		return fmt.Errorf("/ must be a directory")
	}
	if tb := e.Mode & sIFMT; tb != 0 && typeBits(e.Type) != 0 && tb != typeBits(e.Type) {
		return fmt.Errorf("mode %#o does not match type %s", e.Mode, e.Type)
	}
	if e.Blocks < 0 || e.DirSize < 0 || (e.Type != TypeDir && e.DirSize != 0) {
		return fmt.Errorf("blocks %d or dir_size %d out of range for a %s entry", e.Blocks, e.DirSize, e.Type)
	}
	switch e.Type {
	case TypeSymlink:
		if strings.IndexByte(e.Target, 0) >= 0 {
			return fmt.Errorf("symlink target holds NUL")
		}
	case TypeDir:
		for _, d := range e.Listing {
			if d.Name == "" || d.Name == "." || d.Name == ".." || strings.ContainsAny(d.Name, "/\x00") || len(d.Name) > maxNameLen {
				return fmt.Errorf("listing has an invalid name %s", quote(d.Name))
			}
		}
	}
	return nil
}

// Close releases the decoder and, for OpenFile, the file.
func (im *Image) Close() error {
	im.dec.Close()
	if im.closer != nil {
		return im.closer.Close()
	}
	return nil
}

// Entries returns the entries in load order. The slice is shared: do not modify.
func (im *Image) Entries() []Entry { return im.toc.Entries }

// Lookup finds an entry by its absolute original path.
func (im *Image) Lookup(p string) (*Entry, bool) {
	i, ok := im.find(p)
	if !ok {
		return nil, false
	}
	return &im.toc.Entries[i], true
}

// find is the index of the entry with path p (binary search of byPath).
func (im *Image) find(p string) (int, bool) {
	es := im.toc.Entries
	k := sort.Search(len(im.byPath), func(k int) bool { return es[im.byPath[k]].Path >= p })
	if k < len(im.byPath) && es[im.byPath[k]].Path == p {
		return int(im.byPath[k]), true
	}
	return 0, false
}

// TOCDigest is "sha256:<hex>" of the stored TOC: the identity of the image.
func (im *Image) TOCDigest() string { return im.digest }

// Arch is the machine the image's code runs on, as `uname -m` spells it
// ("x86_64", "aarch64", ...), or "any" when it holds no ELF code
// (docs/SPEC.md 1.5).
func (im *Image) Arch() string { return im.toc.Arch }

// Size is the image file's size in bytes.
func (im *Image) Size() int64 { return im.size }

// DataSize is the size of the data frames (the compressed cpio archive).
func (im *Image) DataSize() int64 { return im.dataEnd }

// Pilots returns the pilot trace header records stored at build time.
func (im *Image) Pilots() []json.RawMessage { im.parseMeta(); return im.toc.Pilots }

// BuildInfo returns the build information stored at build time.
func (im *Image) BuildInfo() map[string]string { im.parseMeta(); return im.toc.Build }

// parseMeta parses the meta area once, when asked: it is checked to be JSON
// at open, and only inspect and push read it. A meta area of another shape
// gives no pilots and no build information.
func (im *Image) parseMeta() {
	im.metaOnce.Do(func() {
		var m tocMeta
		if len(im.meta) > 0 && json.Unmarshal(im.meta, &m) == nil {
			im.toc.Pilots, im.toc.Build = m.Pilots, m.Build
		}
		im.meta = nil
	})
}

func quote(s string) string { return untrusted.Quote(s) }
