package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

// verifyArchive decodes the data frames as one stream, as `zstd -dc` does, and
// checks that the cpio archive it yields lists exactly the TOC's members, in
// load order, with their content, ending with the trailer.
func (im *Image) verifyArchive(ctx context.Context) error {
	zr, err := zstd.NewReader(io.NewSectionReader(im.r, 0, im.dataEnd), zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(maxFrameContent*2))
	if err != nil {
		return err
	}
	defer zr.Close()
	ar := &newcReader{r: bufio.NewReaderSize(zr, 1<<20)}
	inos := map[int]int64{}
	for i := range im.toc.Entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := &im.toc.Entries[i]
		var wantMode uint32
		var wantSize int64
		switch e.Type {
		case TypeDir:
			if e.Path == "/" {
				continue
			}
			wantMode = sIFDIR
		case TypeSymlink:
			wantMode, wantSize = sIFLNK, int64(len(e.Target))
		case TypeRegular:
			wantMode = sIFREG
			if im.owner[i] == i {
				wantSize = e.Size
			}
		default:
			continue
		}
		h, err := ar.next()
		if err != nil {
			return fmt.Errorf("cpio archive, member for %s: %v (corrupt image)", quote(e.Path), err)
		}
		if h.name != memberName(e.Path) || h.mode&sIFMT != wantMode || h.size != wantSize {
			return fmt.Errorf("cpio archive has %q (mode %#o, %d bytes) where the table of contents has %s (%s, %d bytes) (corrupt image)",
				h.name, h.mode, h.size, e.Path, e.Type, wantSize)
		}
		if o := im.owner[i]; o >= 0 && o != i {
			if inos[o] != h.ino {
				return fmt.Errorf("cpio archive: %s is not a hard link of %s (corrupt image)", quote(e.Path), quote(im.toc.Entries[o].Path))
			}
		}
		inos[i] = h.ino
		data := io.LimitReader(ar.r, h.size)
		switch {
		case e.Type == TypeSymlink:
			b, err := io.ReadAll(data)
			if err != nil || string(b) != e.Target {
				return fmt.Errorf("cpio archive: symlink %s has target %q, the table of contents %q (corrupt image)", quote(e.Path), b, e.Target)
			}
		case e.Type == TypeRegular && h.size > 0:
			s := sha256.New()
			if n, err := io.Copy(s, data); err != nil || n != h.size {
				return fmt.Errorf("cpio archive: reading %s: %v (corrupt image)", quote(e.Path), err)
			}
			if got := hex.EncodeToString(s.Sum(nil)); got != e.SHA256 {
				return fmt.Errorf("cpio archive: %s has content sha256:%s, the table of contents sha256:%s (corrupt image)", quote(e.Path), got, e.SHA256)
			}
		}
		if err := ar.skipPad(h.size); err != nil {
			return fmt.Errorf("cpio archive after %s: %v (corrupt image)", quote(e.Path), err)
		}
	}
	h, err := ar.next()
	if err != nil || h.name != "TRAILER!!!" {
		return fmt.Errorf("cpio archive: no TRAILER!!! after the last member (%q, %v) (corrupt image)", h.name, err)
	}
	if n, _ := io.Copy(io.Discard, ar.r); n > 0 {
		return fmt.Errorf("cpio archive: %d bytes after the trailer (corrupt image)", n)
	}
	return nil
}

type newcHeader struct {
	ino, size int64
	mode      uint32
	name      string
}

// newcReader reads newc headers from a stream (u-root's reader wants an
// io.ReaderAt; the decompressed archive is a stream).
type newcReader struct {
	r   *bufio.Reader
	pos int64
}

func (a *newcReader) next() (newcHeader, error) {
	var h newcHeader
	b := make([]byte, newcHeaderLen)
	if _, err := io.ReadFull(a.r, b); err != nil {
		return h, err
	}
	if string(b[:6]) != "070701" {
		return h, fmt.Errorf("no newc magic at archive offset %d", a.pos)
	}
	field := func(i int) (int64, error) {
		v, err := strconv.ParseUint(string(b[6+8*i:14+8*i]), 16, 32)
		return int64(v), err
	}
	var f [13]int64
	for i := range f {
		v, err := field(i)
		if err != nil {
			return h, fmt.Errorf("bad newc header field at archive offset %d", a.pos)
		}
		f[i] = v
	}
	h.ino, h.mode, h.size = f[0], uint32(f[1]), f[6]
	nameLen := f[11]
	if nameLen < 1 || nameLen > 4097 {
		return h, fmt.Errorf("newc name length %d", nameLen)
	}
	name := make([]byte, round4(newcHeaderLen+nameLen)-newcHeaderLen)
	if _, err := io.ReadFull(a.r, name); err != nil {
		return h, err
	}
	h.name = string(name[:nameLen-1])
	a.pos += newcHeaderLen + int64(len(name))
	return h, nil
}

func (a *newcReader) skipPad(size int64) error {
	a.pos += size
	pad := round4(a.pos) - a.pos
	a.pos += pad
	_, err := a.r.Discard(int(pad))
	return err
}
