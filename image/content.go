package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"
)

// frameRawSize is how many bytes frame k of owner entry o decodes to: the cpio
// header in the first frame, the member's padding in the last.
func (im *Image) frameRawSize(o, k int) int64 {
	e := &im.toc.Entries[o]
	n := e.Frames[k].USize
	if k == 0 {
		n += headerLen(memberName(e.Path))
	}
	if k == len(e.Frames)-1 {
		n += round4(e.Size) - e.Size
	}
	return n
}

// decodeFrame decompresses comp, frame k of owner entry o, with dec into dst
// (reused when large enough), checks its cpio framing and returns the
// content bytes.
func (im *Image) decodeFrame(dec *zstd.Decoder, o, k int, comp, dst []byte) (content, buf []byte, err error) {
	e := &im.toc.Entries[o]
	want := im.frameRawSize(o, k)
	// Capacity bounds the output (WithDecodeAllCapLimit: a larger frame is an
	// error); the slack lets the decoder use its fast block copies.
	const slack = 64
	if int64(cap(dst)) < want+slack { // grow geometrically: few allocations per worker
		dst = make([]byte, 0, max(want+slack, 2*int64(cap(dst)), 256<<10))
	}
	out, err := dec.DecodeAll(comp, dst[:0:want+slack])
	if err != nil {
		return nil, dst, fmt.Errorf("%s: frame %d at offset %d: %v (corrupt image)", quote(e.Path), k, e.Frames[k].Offset, err)
	}
	if int64(len(out)) != want {
		return nil, dst, fmt.Errorf("%s: frame %d at offset %d decodes to %d bytes, want %d (corrupt image)", quote(e.Path), k, e.Frames[k].Offset, len(out), want)
	}
	start := int64(0)
	if k == 0 {
		if start, err = parseRegularHeader(out, memberName(e.Path), e.Size); err != nil {
			return nil, dst, fmt.Errorf("%s: %v (corrupt image)", quote(e.Path), err)
		}
	}
	end := start + e.Frames[k].USize
	if k == len(e.Frames)-1 && !allZero(out[end:]) {
		return nil, dst, fmt.Errorf("%s: cpio padding is not zero (corrupt image)", quote(e.Path))
	}
	return out[start:end], dst, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// readFrame reads frame k of entry o's frames from the image.
func (im *Image) readFrame(o, k int, buf []byte) ([]byte, error) {
	f := im.toc.Entries[o].Frames[k]
	if int64(cap(buf)) < f.CSize {
		buf = make([]byte, f.CSize)
	}
	buf = buf[:f.CSize]
	if _, err := im.r.ReadAt(buf, f.Offset); err != nil {
		return nil, fmt.Errorf("reading %s frame %d at offset %d: %w", quote(im.toc.Entries[o].Path), k, f.Offset, err)
	}
	return buf, nil
}

// Content returns e's decompressed content. The SHA-256 digest is checked at
// EOF: the last Read returns an error instead of io.EOF when it is wrong.
func (im *Image) Content(e *Entry) (io.ReadCloser, error) {
	i, ok := im.find(e.Path)
	if !ok {
		return nil, fmt.Errorf("%s is not in the image", quote(e.Path))
	}
	e = &im.toc.Entries[i]
	if e.Type != TypeRegular {
		return nil, fmt.Errorf("%s is a %s, not a regular file with content", quote(e.Path), e.Type)
	}
	return &contentReader{im: im, e: e, owner: im.owner[i], h: sha256.New()}, nil
}

type contentReader struct {
	im        *Image
	e         *Entry
	owner     int
	k         int
	cur       []byte
	comp, raw []byte
	h         hash.Hash
	err       error
}

func (c *contentReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.k == len(c.e.Frames) {
			c.err = checkDigest(c.e, c.h)
			if c.err == nil {
				c.err = io.EOF
			}
			return 0, c.err
		}
		comp, err := c.im.readFrame(c.owner, c.k, c.comp)
		if err != nil {
			c.err = err
			return 0, err
		}
		c.comp = comp
		content, raw, err := c.im.decodeFrame(c.im.dec, c.owner, c.k, comp, c.raw)
		c.raw = raw
		if err != nil {
			c.err = err
			return 0, err
		}
		c.h.Write(content)
		c.cur = content
		c.k++
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

func (c *contentReader) Close() error { return nil }

func checkDigest(e *Entry, h hash.Hash) error {
	sum := h.Sum(nil)
	want, _ := hex.DecodeString(e.SHA256)
	if !bytes.Equal(sum, want) {
		return fmt.Errorf("%s: content digest sha256:%x, the table of contents says sha256:%s (corrupt image)", quote(e.Path), sum, e.SHA256)
	}
	return nil
}
