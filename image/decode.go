package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"runtime"
	"sort"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// The parallel decoder behind Extract and Verify: one goroutine reads the data
// frames front to back (a sequential read, the fast path on Lustre), workers
// decompress them, and each object's content is hashed in order as its frames
// complete.

// objectSink receives the content of one stored object (all entries that share
// its frames). begin is called once before the object's first write, write for
// each frame's content at its offset (concurrently, in any order), end after
// the last frame once the digest was checked. All may run concurrently for
// different objects.
type objectSink interface {
	begin(owner int) error
	write(owner int, off int64, content []byte) error
	end(owner int) error
}

type frameTask struct {
	owner, k int
	off      int64 // content offset of this frame in the object
	comp     []byte
	obj      *objectState
}

type objectState struct {
	once     sync.Once // sink.begin, by the first frame decoded
	beginErr error
	mu       sync.Mutex
	next     int
	pending  map[int][]byte
	h        hash.Hash // nil: digests not checked
	fh       hash.Hash // frames digest, fed by the reader in file order; nil: not checked
}

// owners returns the entries that own frames, in file order.
func (im *Image) owners() []int {
	var os []int
	for i, o := range im.owner {
		if o == i {
			os = append(os, i)
		}
	}
	sort.Slice(os, func(a, b int) bool {
		return im.toc.Entries[os[a]].Frames[0].Offset < im.toc.Entries[os[b]].Frames[0].Offset
	})
	return os
}

// decodeObjects streams every stored object through sink. progress (may be
// nil) gets the content bytes done so far.
// digestChecks says which SHA-256 digests decodeObjects checks.
type digestChecks struct {
	content bool // each object's content (entry sha256): decompressed bytes, in order
	frames  bool // each object's compressed frames (frames_sha256): a third of the bytes
	stream  bool // the members between the objects' frames match the TOC (streamCheck)
}

func (im *Image) decodeObjects(ctx context.Context, workers int, sink objectSink, progress func(int64), check digestChecks) error {
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// A fixed set of read buffers bounds memory and lets the reader run
	// ahead of the decompressors by a few batches only.
	free := make(chan []byte, 2*workers+1)
	for range cap(free) {
		free <- nil
	}
	tasks := make(chan *frameBatch, cap(free))
	var wg sync.WaitGroup
	var progMu sync.Mutex
	var done int64
	var maxRaw int64 // the largest frame's decoded size: one decode buffer per worker
	for _, o := range im.owners() {
		for k := range im.toc.Entries[o].Frames {
			maxRaw = max(maxRaw, im.frameRawSize(o, k))
		}
	}
	for w := 0; w < workers; w++ {
		dec, err := frameDecoder(check.frames)
		if err != nil {
			cancel(err)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer dec.Close()
			raw := make([]byte, 0, maxRaw+64) // decodeFrame's size with its slack
			for b := range tasks {
				for _, t := range b.frames {
					if ctx.Err() != nil {
						break
					}
					var n int64
					var err error
					if n, raw, err = im.decodeTask(dec, t, raw, sink); err != nil {
						cancel(err)
						break
					}
					if progress != nil {
						progMu.Lock()
						done += n
						progress(done)
						progMu.Unlock()
					}
				}
				free <- b.buf
			}
		}()
	}
	readErr := im.readBatches(ctx, free, tasks, check)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return readErr
}

// frameDecoder is one worker's decoder. Content frames are decoded into
// buffers of exactly the expected size (WithDecodeAllCapLimit), so a hostile
// frame cannot inflate further. framesChecked: the SHA-256 of every object's
// compressed frames is verified (readBatches), so each frame's XXH64 content
// checksum is not computed: decompression is deterministic, so the digest of
// the compressed bytes covers the decoded bytes too, with a cryptographic
// hash where XXH64 is not one (6% of staging's CPU, docs/bench/stage.md).
// The checksum field must still be there (the frame is parsed as before);
// without the frames digest (SkipDigests, Verify's own content digests
// aside) the checksum is checked.
func frameDecoder(framesChecked bool) (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxFrameUSize+4096),
		zstd.WithDecodeAllCapLimit(true), zstd.IgnoreChecksum(framesChecked))
}

// frameBatch is a run of consecutive frames read in one piece: small
// objects are most of an image's objects and frames, and handing each frame
// to a worker on its own cost more in goroutine wake-ups than decoding it.
type frameBatch struct {
	buf    []byte // the compressed bytes of all frames
	frames []*frameTask
}

// batchBytes is the compressed size at which the reader hands a batch on.
const batchBytes = 512 << 10

// decodeTask decodes one frame and passes its content to sink; it returns
// the content size and the (grown) decode buffer.
func (im *Image) decodeTask(dec *zstd.Decoder, t *frameTask, raw []byte, sink objectSink) (int64, []byte, error) {
	content, raw, err := im.decodeFrame(dec, t.owner, t.k, t.comp, raw)
	if err == nil {
		// Whichever frame of the object comes first opens its files:
		// creating thousands of small files in parallel.
		t.obj.once.Do(func() { t.obj.beginErr = sink.begin(t.owner) })
		err = t.obj.beginErr
	}
	if err == nil {
		err = sink.write(t.owner, t.off, content)
	}
	if err == nil {
		err = im.frameDone(t, content, sink)
	}
	return int64(len(content)), raw, err
}

// readBatches reads the data frames front to back (one sequential read, the
// fast path on Lustre), a batch of about batchBytes per read straight into
// the batch's buffer, checks each object's frames digest, and sends the
// batches to the workers. It closes tasks.
func (im *Image) readBatches(ctx context.Context, free chan []byte, tasks chan<- *frameBatch, check digestChecks) error {
	defer close(tasks)
	bufSize := int64(batchBytes) // every buffer holds the largest frame: allocated once
	for _, o := range im.owners() {
		for _, f := range im.toc.Entries[o].Frames {
			bufSize = max(bufSize, f.CSize)
		}
	}
	var b *frameBatch
	var start, end int64 // the batch's extent in the image
	// flush reads the batch, feeds the frames digests in file order, checks
	// the digest of every object whose last frame it holds, and sends it.
	flush := func() error {
		if b == nil {
			return nil
		}
		b.buf = b.buf[:end-start]
		if n, err := im.r.ReadAt(b.buf, start); n < len(b.buf) {
			t := b.frames[0]
			return fmt.Errorf("reading %s frame %d at offset %d: %w (truncated image?)", im.toc.Entries[t.owner].Path, t.k, start, err)
		}
		for _, t := range b.frames {
			f := im.toc.Entries[t.owner].Frames[t.k]
			t.comp = b.buf[f.Offset-start : f.Offset-start+f.CSize]
			if t.obj.fh == nil {
				continue
			}
			t.obj.fh.Write(t.comp)
			if e := &im.toc.Entries[t.owner]; t.k == len(e.Frames)-1 {
				if got := hex.EncodeToString(t.obj.fh.Sum(nil)); got != e.FramesSHA256 {
					return fmt.Errorf("%s: compressed frames have sha256:%s, the table of contents says sha256:%s (corrupt image)", e.Path, got, e.FramesSHA256)
				}
			}
		}
		tasks <- b // never blocks: a batch holds one of the cap(tasks) buffers
		b = nil
		return nil
	}
	var sc *streamCheck
	var gapReader *bufio.Reader // the members between objects, for sc
	if check.stream {
		var err error
		if sc, err = newStreamCheck(im); err != nil {
			return err
		}
		defer sc.close()
		gapReader = bufio.NewReaderSize(nil, 64<<10)
	}
	gap := func(from, n int64, o int) error {
		gapReader.Reset(io.NewSectionReader(im.r, from, n))
		return sc.gap(gapReader, n, o)
	}
	var pos int64 // end of the previous frame
	for _, o := range im.owners() {
		e := &im.toc.Entries[o]
		obj := &objectState{pending: map[int][]byte{}}
		if check.content {
			obj.h = sha256.New()
		}
		if check.frames {
			obj.fh = sha256.New()
		}
		var coff int64
		for k, f := range e.Frames {
			if f.Offset < pos {
				return fmt.Errorf("%s: frame %d at offset %d lies before the end of the previous frame (corrupt image)", e.Path, k, f.Offset)
			}
			if k == 0 && sc != nil {
				if err := gap(pos, f.Offset-pos, o); err != nil {
					return err
				}
			}
			pos = f.Offset + f.CSize
			if b != nil && pos-start > int64(cap(b.buf)) {
				if err := flush(); err != nil { // full: the frame starts the next batch
					return err
				}
			}
			if b == nil {
				var buf []byte
				select {
				case buf = <-free:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				if int64(cap(buf)) < bufSize {
					buf = make([]byte, 0, bufSize)
				}
				b, start = &frameBatch{buf: buf[:0]}, f.Offset
			}
			end = pos
			b.frames = append(b.frames, &frameTask{owner: o, k: k, off: coff, obj: obj})
			coff += f.USize
			if end-start >= batchBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if sc != nil {
		return gap(pos, im.dataEnd-pos, -1)
	}
	return nil
}

// frameDone feeds frame t's content to its object's hash in frame order
// (keeping a copy only when an earlier frame is still being decoded) and
// finishes the object after its last frame.
func (im *Image) frameDone(t *frameTask, content []byte, sink objectSink) error {
	obj := t.obj
	e := &im.toc.Entries[t.owner]
	obj.mu.Lock()
	defer obj.mu.Unlock()
	if obj.h == nil { // digests not checked: count frames only
		obj.next++
		if obj.next == len(e.Frames) {
			return sink.end(t.owner)
		}
		return nil
	}
	if t.k != obj.next {
		obj.pending[t.k] = append([]byte(nil), content...)
		return nil
	}
	obj.h.Write(content)
	obj.next++
	for {
		b, ok := obj.pending[obj.next]
		if !ok {
			break
		}
		delete(obj.pending, obj.next)
		obj.h.Write(b)
		obj.next++
	}
	if obj.next < len(e.Frames) {
		return nil
	}
	if err := checkDigest(e, obj.h); err != nil {
		return err
	}
	return sink.end(t.owner)
}

// discardSink checks content without keeping it (Verify).
type discardSink struct{}

func (discardSink) begin(int) error                { return nil }
func (discardSink) write(int, int64, []byte) error { return nil }
func (discardSink) end(int) error                  { return nil }

// Verify decompresses every object frame and checks every content digest,
// then reads the whole data stream as a cpio archive and checks that it
// matches the table of contents (what `zstd -dc | cpio -i` would see).
func (im *Image) Verify(ctx context.Context) error {
	if err := im.decodeObjects(ctx, 0, discardSink{}, nil, digestChecks{content: true, frames: true}); err != nil {
		return err
	}
	return im.verifyArchive(ctx)
}
