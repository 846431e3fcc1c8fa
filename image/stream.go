package image

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// streamCheck follows the cpio stream between the objects' own frames while
// Extract reads the image, and checks that it holds exactly the members the
// TOC says, in load order, with their names, types, sizes and symlink
// targets, then the trailer. Extract itself builds the tree from the TOC, but
// the same image fed to `zstd -dc | cpio -i` builds it from the stream: an
// image whose stream says more (an extra ../ or absolute member) or something
// else than its TOC is refused, as Verify refuses it. The objects' frames are
// checked by decodeFrame (exact size, their own header, zero padding).
type streamCheck struct {
	im   *Image
	next int // first entry (load order) whose member has not been seen
	dec  *zstd.Decoder
}

func newStreamCheck(im *Image) (*streamCheck, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxFrameContent*2))
	if err != nil {
		return nil, err
	}
	return &streamCheck{im: im, dec: dec}, nil
}

func (s *streamCheck) close() { s.dec.Close() }

// metaMember says whether entry i is stored as a member without frames of its
// own (directories but /, symlinks, empty files, later names of shared
// content) and with which mode bits and size.
func (s *streamCheck) metaMember(i int) (mode uint32, size int64, ok bool) {
	e := &s.im.toc.Entries[i]
	switch e.Type {
	case TypeDir:
		return sIFDIR, 0, e.Path != "/"
	case TypeSymlink:
		return sIFLNK, int64(len(e.Target)), true
	case TypeRegular:
		return sIFREG, 0, s.im.owner[i] != i
	}
	return 0, 0, false
}

// gap checks the n data bytes that r holds before the frames of owner entry
// o (o < 0: after the last object, up to the data end). They must decode to
// the members of the entries before o that have no frames of their own, and
// after the last object to the trailer; no more. The decoded output read is
// bounded by what those members take.
func (s *streamCheck) gap(r *bufio.Reader, n int64, o int) error {
	end := len(s.im.toc.Entries)
	if o >= 0 {
		if o < s.next {
			return fmt.Errorf("the frames of %s lie after those of a later entry (corrupt or hostile image)", quote(s.im.toc.Entries[o].Path))
		}
		end = o
	}
	var want int64 // decoded bytes the expected members take
	for i := s.next; i < end; i++ {
		if _, size, ok := s.metaMember(i); ok {
			want += headerLen(memberName(s.im.toc.Entries[i].Path)) + round4(size)
		} else if s.im.owner[i] == i {
			return fmt.Errorf("the frames of %s lie after those of a later entry (corrupt or hostile image)", quote(s.im.toc.Entries[i].Path))
		}
	}
	if o < 0 {
		want += headerLen("TRAILER!!!")
	}
	where := "after the last object"
	if o >= 0 {
		where = "before " + quote(s.im.toc.Entries[o].Path)
	}
	if n == 0 {
		if want > 0 {
			return fmt.Errorf("cpio stream %s: no members where the table of contents has %d bytes of them (corrupt image)", where, want)
		}
		s.next = end + 1
		return nil
	}
	in := io.LimitReader(r, n)
	if err := s.dec.Reset(in); err != nil {
		return err
	}
	// Room for one more header: an extra member is then named in the error.
	ar := &newcReader{r: bufio.NewReader(io.LimitReader(s.dec, want+newcHeaderLen+4100))}
	for i := s.next; i < end; i++ {
		mode, size, ok := s.metaMember(i)
		if !ok {
			continue
		}
		e := &s.im.toc.Entries[i]
		h, err := ar.next()
		if err != nil {
			return fmt.Errorf("cpio stream %s, member for %s: %v (corrupt image)", where, quote(e.Path), err)
		}
		if h.name != memberName(e.Path) || h.mode&sIFMT != mode || h.size != size {
			return fmt.Errorf("cpio stream has %q (mode %#o, %d bytes) where the table of contents has %s (%s, %d bytes) (corrupt or hostile image)",
				h.name, h.mode, h.size, e.Path, e.Type, size)
		}
		if e.Type == TypeSymlink {
			b := make([]byte, size)
			if _, err := io.ReadFull(ar.r, b); err != nil || string(b) != e.Target {
				return fmt.Errorf("cpio stream: symlink %s has target %q, the table of contents %q (corrupt or hostile image)", quote(e.Path), b, e.Target)
			}
		}
		if err := ar.skipPad(size); err != nil {
			return fmt.Errorf("cpio stream after %s: %v (corrupt image)", quote(e.Path), err)
		}
	}
	// Then the gap must end (after the trailer, at the data end): one more
	// member is one the table of contents does not have, and `cpio -i`
	// would create it.
	h, err := ar.next()
	if o < 0 {
		if err == nil && h.name == "TRAILER!!!" && h.size == 0 {
			h, err = ar.next()
		} else if err == nil {
			return fmt.Errorf("cpio stream has a member %q (mode %#o) that the table of contents does not have (corrupt or hostile image)", h.name, h.mode)
		} else {
			return fmt.Errorf("cpio stream: no TRAILER!!! after the last member: %v (corrupt image)", err)
		}
	}
	switch {
	case err == nil:
		return fmt.Errorf("cpio stream has a member %q (mode %#o) %s that the table of contents does not have (corrupt or hostile image)", h.name, h.mode, where)
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("cpio stream %s: %v (corrupt image)", where, err)
	}
	if rest, err := io.Copy(io.Discard, in); err != nil || rest > 0 {
		return fmt.Errorf("cpio stream %s: %d bytes that are not zstd frames (corrupt image)", where, rest)
	}
	s.next = end + 1
	return nil
}
