package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Image is an opened, validated image. Its methods are safe for concurrent use.
type Image struct {
	r       io.ReaderAt
	closer  io.Closer
	size    int64
	digest  string
	toc     toc
	index   map[string]int
	owner   []int         // per entry: index of the entry whose cpio header starts its frames (-1: none)
	sharers map[int][]int // owner -> every entry sharing its frames (owner first)
	dec     *zstd.Decoder
	dataEnd int64
}

// maxEntries bounds the entries a reader accepts (hostile images).
const maxEntries = 5_000_000

// maxFrameRatio is the most a zstd frame can expand (128 KiB per 4-byte RLE
// block); a legitimate frame of zeros reaches about 30,000 (level 19).
const maxFrameRatio = 1 << 15

// OpenFile opens and validates the image at path; Close closes the file.
func OpenFile(p string) (*Image, error) {
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
	im, err := Open(f, fi.Size())
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
func Open(r io.ReaderAt, size int64) (*Image, error) {
	if size < footerSize {
		return nil, fmt.Errorf("not a dlbundle image: %d bytes is shorter than the %d-byte footer (truncated?)", size, footerSize)
	}
	fb := make([]byte, footerSize)
	if _, err := r.ReadAt(fb, size-footerSize); err != nil {
		return nil, fmt.Errorf("reading image footer: %w", &ReadError{err})
	}
	ft, err := parseFooter(fb, size)
	if err != nil {
		return nil, err
	}
	frame := make([]byte, ft.TOCLength)
	if _, err := r.ReadAt(frame, ft.TOCOffset); err != nil {
		return nil, fmt.Errorf("reading table of contents: %w", &ReadError{err})
	}
	if binary.LittleEndian.Uint32(frame) != tocFrameMagic || int64(binary.LittleEndian.Uint32(frame[4:])) != ft.TOCLength-skippableHeaderSize {
		return nil, fmt.Errorf("no table-of-contents frame at offset %d (corrupt image)", ft.TOCOffset)
	}
	payload := frame[skippableHeaderSize:]
	if sum := sha256.Sum256(payload); !bytes.Equal(sum[:], ft.TOCSHA256[:]) {
		return nil, fmt.Errorf("table of contents digest mismatch: footer says sha256:%x, content is sha256:%x (corrupt image)", ft.TOCSHA256, sum)
	}
	tocDec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxTOCSize), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	js, err := tocDec.DecodeAll(payload, nil)
	tocDec.Close()
	if err != nil {
		return nil, fmt.Errorf("decompressing table of contents: %v (corrupt image)", err)
	}
	im := &Image{r: r, size: size, digest: "sha256:" + hex.EncodeToString(ft.TOCSHA256[:]), dataEnd: ft.TOCOffset}
	if err := im.load(js); err != nil {
		return nil, err
	}
	// Content frames are decoded into buffers of exactly the expected size
	// (WithDecodeAllCapLimit), so a hostile frame cannot inflate further.
	im.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(maxFrameUSize+4096), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, err
	}
	return im, nil
}

// load parses and validates the TOC.
func (im *Image) load(js []byte) error {
	t := &im.toc
	if err := json.Unmarshal(js, t); err != nil {
		return fmt.Errorf("table of contents is not valid JSON: %v", err)
	}
	if t.Format != FormatName || t.Version != FormatVersion {
		return fmt.Errorf("table of contents says format %q version %d, want %q version %d", t.Format, t.Version, FormatName, FormatVersion)
	}
	if t.DataEnd != im.dataEnd {
		return fmt.Errorf("table of contents says data ends at %d, the footer %d (corrupt image)", t.DataEnd, im.dataEnd)
	}
	if len(t.Entries) > maxEntries {
		return fmt.Errorf("table of contents has %d entries, more than the %d this reader accepts", len(t.Entries), maxEntries)
	}
	im.index = make(map[string]int, len(t.Entries))
	for i := range t.Entries {
		e := &t.Entries[i]
		if err := checkEntry(e, i); err != nil {
			return fmt.Errorf("entry %d (%q): %v", i, e.Path, err)
		}
		if _, dup := im.index[e.Path]; dup {
			return fmt.Errorf("entry %d: path %s appears twice", i, e.Path)
		}
		im.index[e.Path] = i
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		for p := path.Dir(e.Path); e.Path != "/"; p = path.Dir(p) {
			if j, ok := im.index[p]; ok && t.Entries[j].Type != TypeDir {
				return fmt.Errorf("entry %s lies below %s, which is a %s, not a directory", e.Path, p, t.Entries[j].Type)
			}
			if p == "/" {
				break
			}
		}
	}
	return im.checkFrames()
}

// checkFrames checks that every object's frames lie inside the data, that
// objects do not overlap, and that entries sharing frames share content.
func (im *Image) checkFrames() error {
	es := im.toc.Entries
	im.owner = make([]int, len(es))
	im.sharers = map[int][]int{}
	byStart := map[int64]int{} // first frame offset -> owner entry
	var owners []int
	for i := range es {
		im.owner[i] = -1
		e := &es[i]
		if len(e.Frames) == 0 {
			continue
		}
		start := e.Frames[0].Offset
		if o, ok := byStart[start]; ok {
			a := &es[o]
			if a.SHA256 != e.SHA256 || a.Size != e.Size || a.FramesSHA256 != e.FramesSHA256 || len(a.Frames) != len(e.Frames) {
				return fmt.Errorf("entries %s and %s share frames at offset %d but not their content", a.Path, e.Path, start)
			}
			for k := range a.Frames {
				if a.Frames[k] != e.Frames[k] {
					return fmt.Errorf("entries %s and %s share frames at offset %d but not all of them", a.Path, e.Path, start)
				}
			}
			im.owner[i] = o
			im.sharers[o] = append(im.sharers[o], i)
			continue
		}
		byStart[start] = i
		im.owner[i] = i
		im.sharers[i] = []int{i}
		owners = append(owners, i)
	}
	sort.Slice(owners, func(a, b int) bool { return es[owners[a]].Frames[0].Offset < es[owners[b]].Frames[0].Offset })
	var end int64
	prev := ""
	for _, i := range owners {
		e := &es[i]
		if e.Frames[0].Offset < end {
			return fmt.Errorf("frames of %s overlap those of %s (corrupt or hostile image)", e.Path, prev)
		}
		last := e.Frames[len(e.Frames)-1]
		end, prev = last.Offset+last.CSize, e.Path
	}
	if end > im.dataEnd {
		return fmt.Errorf("frames of %s end at %d, past the data end %d (corrupt image)", prev, end, im.dataEnd)
	}
	return nil
}

// checkPath accepts absolute, lexically clean paths without NUL.
func checkPath(p string) error {
	if p == "" || p[0] != '/' {
		return fmt.Errorf("path %q is not absolute", p)
	}
	if path.Clean(p) != p {
		return fmt.Errorf("path %q is not clean (no //, . or .. components, no trailing /)", p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("path %q holds a NUL byte", p)
	}
	if len(p) > 4096 {
		return fmt.Errorf("path of %d bytes is longer than PATH_MAX", len(p))
	}
	return nil
}

func checkEntry(e *Entry, i int) error {
	if err := checkPath(e.Path); err != nil {
		return err
	}
	if e.Order != i {
		return fmt.Errorf("order %d, want its position %d", e.Order, i)
	}
	switch e.Type {
	case TypeRegular, TypeDir, TypeSymlink, TypeMissing, TypeExternal:
	default:
		return fmt.Errorf("unknown type %q", e.Type)
	}
	if e.Path == "/" && e.Type != TypeDir {
		return fmt.Errorf("/ must be a directory")
	}
	if tb := e.Mode & sIFMT; tb != 0 && typeBits(e.Type) != 0 && tb != typeBits(e.Type) {
		return fmt.Errorf("mode %#o does not match type %s", e.Mode, e.Type)
	}
	if e.Type != TypeRegular && (len(e.Frames) > 0 || e.Size != 0 || e.SHA256 != "" || e.FramesSHA256 != "") {
		return fmt.Errorf("a %s entry has content fields", e.Type)
	}
	if e.Blocks < 0 || e.DirSize < 0 || (e.Type != TypeDir && e.DirSize != 0) {
		return fmt.Errorf("blocks %d or dir_size %d out of range for a %s entry", e.Blocks, e.DirSize, e.Type)
	}
	if e.Type != TypeSymlink && e.Target != "" {
		return fmt.Errorf("a %s entry has a symlink target", e.Type)
	}
	if e.Type != TypeDir && (len(e.Listing) > 0 || len(e.Dots) > 0 || e.DotDotIno != 0) {
		return fmt.Errorf("a %s entry has a listing", e.Type)
	}
	if n := len(e.Listing) + 2; len(e.Dots) > 0 && (len(e.Dots) != 2 || e.Dots[0] == e.Dots[1] ||
		e.Dots[0] < 0 || e.Dots[1] < 0 || e.Dots[0] >= n || e.Dots[1] >= n) {
		return fmt.Errorf("dots %v are not two positions in a listing of %d names and . and ..", e.Dots, len(e.Listing))
	}
	switch e.Type {
	case TypeRegular:
		return checkContent(e)
	case TypeSymlink:
		if e.Target == "" || len(e.Target) > 4095 || strings.IndexByte(e.Target, 0) >= 0 {
			return fmt.Errorf("symlink target is empty, longer than 4095 bytes or holds NUL")
		}
	case TypeDir:
		// In the order the directory read returned (docs/SPEC.md): unique, not sorted.
		seen := make(map[string]struct{}, len(e.Listing))
		for _, d := range e.Listing {
			if d.Name == "" || d.Name == "." || d.Name == ".." || strings.ContainsAny(d.Name, "/\x00") || len(d.Name) > 255 {
				return fmt.Errorf("listing has an invalid name %q", d.Name)
			}
			if _, dup := seen[d.Name]; dup {
				return fmt.Errorf("listing is not unique: %q appears twice", d.Name)
			}
			seen[d.Name] = struct{}{}
			switch d.Type {
			case TypeRegular, TypeDir, TypeSymlink, "other":
			default:
				return fmt.Errorf("listing entry %q has unknown type %q", d.Name, d.Type)
			}
		}
	}
	return nil
}

func checkContent(e *Entry) error {
	if e.Size < 0 || e.Size > maxCpioSize {
		return fmt.Errorf("size %d out of range", e.Size)
	}
	if !isHexDigest(e.SHA256) {
		return fmt.Errorf("sha256 %q is not 64 lowercase hex digits", e.SHA256)
	}
	if e.Size == 0 {
		if len(e.Frames) != 0 || e.FramesSHA256 != "" {
			return fmt.Errorf("empty file with frames")
		}
		return nil
	}
	if !isHexDigest(e.FramesSHA256) {
		return fmt.Errorf("frames_sha256 %q is not 64 lowercase hex digits", e.FramesSHA256)
	}
	if len(e.Frames) == 0 {
		return fmt.Errorf("%d bytes of content but no frames", e.Size)
	}
	if int64(len(e.Frames)) > e.Size {
		return fmt.Errorf("%d frames for %d bytes", len(e.Frames), e.Size)
	}
	var sum, next int64
	for k, f := range e.Frames {
		// Offset+CSize must not overflow: a frame at 2^63-8 would otherwise
		// "end" before the data end (checkFrames).
		if f.Offset < 0 || f.CSize <= 0 || f.CSize > maxFrameUSize*2 || f.Offset > math.MaxInt64-f.CSize || f.USize < 0 || f.USize > maxFrameUSize {
			return fmt.Errorf("frame %d (off %d csize %d usize %d) out of range", k, f.Offset, f.CSize, f.USize)
		}
		// A zstd block decodes to at most 128 KiB and takes at least 4 bytes
		// (an RLE block): no frame expands more than 32768 times. A TOC that
		// says otherwise declares content the frames cannot hold, to make
		// staging reserve (or a reader expect) what the image is not.
		if f.USize > f.CSize*maxFrameRatio {
			return fmt.Errorf("frame %d declares %d bytes from %d compressed (a ratio over %d, which zstd cannot reach; corrupt or hostile image)", k, f.USize, f.CSize, maxFrameRatio)
		}
		if k > 0 && f.Offset != next {
			return fmt.Errorf("frame %d at %d does not follow the previous frame (ends at %d)", k, f.Offset, next)
		}
		if f.USize == 0 && !(k == 0) {
			return fmt.Errorf("frame %d holds no content", k)
		}
		next = f.Offset + f.CSize
		sum += f.USize
	}
	if sum != e.Size {
		return fmt.Errorf("frames hold %d bytes, size is %d", sum, e.Size)
	}
	return nil
}

func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
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
	i, ok := im.index[p]
	if !ok {
		return nil, false
	}
	return &im.toc.Entries[i], true
}

// TOCDigest is "sha256:<hex>" of the stored TOC: the identity of the image.
func (im *Image) TOCDigest() string { return im.digest }

// Size is the image file's size in bytes.
func (im *Image) Size() int64 { return im.size }

// DataSize is the size of the data frames (the compressed cpio archive).
func (im *Image) DataSize() int64 { return im.dataEnd }

// Pilots returns the pilot trace header records stored at build time.
func (im *Image) Pilots() []json.RawMessage { return im.toc.Pilots }

// BuildInfo returns the build information stored at build time.
func (im *Image) BuildInfo() map[string]string { return im.toc.Build }
