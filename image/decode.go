package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/stagetime"
)

// The parallel decoder behind Extract and Verify: the workers take batches of
// data frames in file order (one sequential read of the image, the fast path
// on Lustre), feed the frames digests in order, and decompress them; each
// object's content is hashed in order as its frames complete.

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
	local    bool // all frames of the object are in this frame's batch
}

type objectState struct {
	once     sync.Once // sink.begin, by the first frame decoded
	beginErr error
	mu       sync.Mutex
	next     int
	pending  map[int][]byte
	h        hash.Hash // nil: digests not checked
	fh       hash.Hash // frames digest, fed in file order by nextBatch; nil: not checked
}

// owners returns the entries that own frames, in file order (the objects'
// order, docs/SPEC.md 1.4).
func (im *Image) owners() []int { return im.objects }

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
	p, err := im.planBatches(check)
	if err != nil {
		return err
	}
	if p.sc != nil {
		defer p.sc.close()
	}
	var maxRaw int64 // the largest frame's decoded size: one decode buffer per worker
	for _, o := range im.owners() {
		for k := range im.toc.Entries[o].Frames {
			maxRaw = max(maxRaw, im.frameRawSize(o, k))
		}
	}
	workers = decodeWorkers(workers, maxRaw, p.bufSize)
	// No reader goroutine and no channels: each worker takes the next batch
	// in file order under p.mu, reads it into its own buffer (the image is
	// still read as one sequential stream), feeds the frames digests, and
	// decodes it. Handing batches from a reader to the workers cost a
	// wake-up per batch and per returned buffer (futex calls for one
	// extraction of a torch-sized image: 5,726 then, 3,175 now), with a
	// third goroutine on 2 cores.
	var wg sync.WaitGroup
	var progMu sync.Mutex
	var done int64
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
			defer stagetime.Worker()()
			rawMem, freeRaw := populated(maxRaw + 64) // decodeFrame's size with its slack
			defer freeRaw()
			raw := rawMem[:0]
			buf, freeBuf := populated(p.bufSize)
			defer freeBuf()
			for ctx.Err() == nil {
				b, err := im.nextBatch(ctx, p, &buf)
				if err != nil {
					cancel(err)
					return
				}
				if b == nil {
					return
				}
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
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// decodeBudget bounds the memory of all decode workers together
// (docs/SPEC.md 3.2): the number of workers is lowered until their buffers
// fit, so that a 128-core node decodes any image in the memory a 13-core
// one does (it once took one 64 MiB buffer per core, 1.06 GB of RSS for an
// 8 KB image at 16 workers). 13 workers of 4 MiB frames decode faster than
// a node writes tmpfs or reads an image.
const decodeBudget = 64 << 20

// decoderMem is what a zstd decoder holds besides the buffers it is given
// (measured: ~160 KB after a 4 MiB frame).
const decoderMem = 256 << 10

// decodeWorkers is how many of want workers fit decodeBudget, each with a
// decode buffer for the largest frame (maxRaw), a read buffer of bufSize and
// a decoder; at least one.
func decodeWorkers(want int, maxRaw, bufSize int64) int {
	per := populatedSize(maxRaw+64) + populatedSize(bufSize) + decoderMem
	return max(1, min(want, int(decodeBudget/per)))
}

// populatedSize is what populated(n) maps: n rounded up to a page (a
// huge-page buffer is aligned at its start only: its whole huge pages are
// huge, its tail small pages; populatedHuge), so that the workers' buffers
// fit decodeBudget as mapped, not only as asked for.
func populatedSize(n int64) int64 {
	page := int64(os.Getpagesize())
	return (n + page - 1) &^ (page - 1)
}

// populated returns n bytes of anonymous memory whose pages are allocated
// at once rather than by one page fault each as the first frames are read
// and decoded into them, and the function that gives them back.
//
// Huge pages where the kernel gives them (transparent huge pages,
// "madvise" or "always"; populatedHuge): a worker's buffers are ~6 MiB (a
// 4 MiB frame and the largest batch), 1,600 small pages, and on the
// benchmark's VM (a hypervisor that shadows the page tables) the first
// touch of each small page costs ~8 us even when populated, ~16 us when
// not, where a huge page costs ~0.2 ms for 512 pages' worth: a numpy
// stage's CPU fell from 340 to 281 ms, its wall time from 313 to 268 ms
// (docs/benchmarks.md, round 5, issue 42). On a bare node the gain is the
// populate's (~4x less) and fewer TLB misses of the decoder's 4 MiB
// window. Without huge pages, small pages populated at once, as before.
//
// Given back, buffers are kept for the next extraction of this process
// (up to decodeBudget in all), not unmapped: unmapping small pages cost
// the last worker 1-3 ms at the very end of the extraction, with a TLB
// shootdown to the other core while the first ran. The process that
// staged execs the app or exits soon after, which frees them at once; one
// that extracts again reuses them.
func populated(n int64) ([]byte, func()) {
	if b := bufPool.take(n); b != nil {
		return b[:n], func() { bufPool.give(b) }
	}
	if b, ok := populatedHuge(n); ok {
		return b[:n], func() { bufPool.give(b) }
	}
	b, err := mmapAnon(int(n), unix.MAP_POPULATE)
	if err != nil {
		return make([]byte, n), func() {}
	}
	return b, func() { bufPool.give(b) }
}

// mmapAnon maps n bytes of private anonymous memory. Mapped and unmapped
// by address (MmapPtr, munmap), not through unix.Mmap, whose Munmap takes
// only the very slice it returned: populatedHuge unmaps the slack around
// an aligned part.
func mmapAnon(n, flags int) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|flags)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// munmap unmaps b, the whole of a mapping or a page-aligned part of one.
func munmap(b []byte) {
	if len(b) > 0 {
		unix.MunmapPtr(unsafe.Pointer(&b[0]), uintptr(len(b)))
	}
}

// hugePage is the size of a transparent huge page on amd64 and on arm64
// with 4 KiB pages; elsewhere the madvise is harmless (the kernel uses the
// pages it has).
const hugePage = 2 << 20

// populatedHuge is populated's mapping with its start aligned to hugePage
// and marked MADV_HUGEPAGE before it is populated (MADV_POPULATE_WRITE,
// Linux 5.14): every whole huge page of it is one, the rest (less than
// hugePage at its end) small pages, so that it holds what was asked,
// rounded to a page, as decodeBudget counts it. !ok where either madvise
// is refused (nothing is left mapped then).
func populatedHuge(n int64) ([]byte, bool) {
	if n < hugePage {
		return nil, false
	}
	size := int(populatedSize(n))
	m, err := mmapAnon(size+hugePage, 0)
	if err != nil {
		return nil, false
	}
	off := (hugePage - int(uintptr(unsafe.Pointer(&m[0])))%hugePage) % hugePage
	munmap(m[:off]) // the slack on both sides: what is kept is the aligned part alone
	munmap(m[off+size:])
	b := m[off : off+size : off+size]
	if unix.Madvise(b, unix.MADV_HUGEPAGE) != nil || unix.Madvise(b, unix.MADV_POPULATE_WRITE) != nil {
		munmap(b)
		return nil, false
	}
	return b, true
}

// bufPool holds the mappings populated gave back.
var bufPool mappedPool

type mappedPool struct {
	mu    sync.Mutex
	free  [][]byte
	bytes int64
}

// take returns the smallest kept mapping of at least n bytes (nil if none)
// and no longer keeps it.
func (p *mappedPool) take(n int64) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	for i, b := range p.free {
		if int64(len(b)) >= n && (best < 0 || len(b) < len(p.free[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := p.free[best]
	p.free = append(p.free[:best], p.free[best+1:]...)
	p.bytes -= int64(len(b))
	return b
}

// give keeps b for a later take, or unmaps it when decodeBudget is kept
// already.
func (p *mappedPool) give(b []byte) {
	p.mu.Lock()
	if p.bytes+int64(len(b)) <= decodeBudget {
		p.free = append(p.free, b)
		p.bytes += int64(len(b))
		b = nil
	}
	p.mu.Unlock()
	munmap(b)
}

// frameDecoder is one worker's decoder. Content frames are decoded into
// buffers of exactly the expected size (WithDecodeAllCapLimit), so a hostile
// frame cannot inflate further. framesChecked: the SHA-256 of every object's
// compressed frames is verified (nextBatch), so each frame's XXH64 content
// checksum is not computed: decompression is deterministic, so the digest of
// the compressed bytes covers the decoded bytes too, with a cryptographic
// hash where XXH64 is not one (~3% of an extraction's CPU, docs/bench/stage.md).
// The checksum field must still be there (the frame is parsed as before);
// without the frames digest (SkipDigests, Verify's own content digests
// aside) the checksum is checked.
func frameDecoder(framesChecked bool) (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxFrameContent+64<<10),
		zstd.WithDecodeAllCapLimit(true), zstd.IgnoreChecksum(framesChecked))
}

// frameBatch is a run of consecutive frames read in one piece: small
// objects are most of an image's objects and frames, and handing each frame
// to a worker on its own cost more in wake-ups than decoding it.
type frameBatch struct {
	start, end int64 // the batch's extent in the image
	frames     []*frameTask
	gaps       []gapSpan // the cpio members before its objects, checked before it is read
}

// gapSpan is the part of the data stream before owner o's frames (o < 0:
// after the last object), checked by streamCheck.gap.
type gapSpan struct {
	from, n int64
	o       int
}

// batchPlan is the image's frames cut into batches, in file order; workers
// take them one after the other (nextBatch).
type batchPlan struct {
	mu        sync.Mutex
	batches   []*frameBatch
	next      int
	tail      *gapSpan // after the last object, checked after the last batch
	bufSize   int64    // every read buffer holds the largest batch: allocated once
	sc        *streamCheck
	gapReader *bufio.Reader // the members between objects, for sc
}

// batchBytes is the compressed size at which a batch is closed.
const batchBytes = 512 << 10

// planBatches cuts the frames into batches of about batchBytes (a frame
// that would overflow the largest frame's size starts the next batch) and
// checks that frames follow each other in the file.
func (im *Image) planBatches(check digestChecks) (*batchPlan, error) {
	p := &batchPlan{bufSize: batchBytes}
	for _, o := range im.owners() {
		for _, f := range im.toc.Entries[o].Frames {
			p.bufSize = max(p.bufSize, f.CSize)
		}
	}
	var b *frameBatch
	var pendingGaps []gapSpan
	var pos int64 // end of the previous frame
	for _, o := range im.owners() {
		e := &im.toc.Entries[o]
		obj := &objectState{}
		if check.content {
			obj.h = sha256.New()
			obj.pending = map[int][]byte{}
		}
		if check.frames {
			obj.fh = sha256.New()
		}
		var coff int64
		for k, f := range e.Frames {
			if f.Offset < pos {
				return nil, fmt.Errorf("%s: frame %d at offset %d lies before the end of the previous frame (corrupt image)", quote(e.Path), k, f.Offset)
			}
			if k == 0 && check.stream {
				pendingGaps = append(pendingGaps, gapSpan{pos, f.Offset - pos, o})
			}
			pos = f.Offset + f.CSize
			if b != nil && pos-b.start > p.bufSize {
				b = nil // full: the frame starts the next batch
			}
			if b == nil {
				b = &frameBatch{start: f.Offset}
				p.batches = append(p.batches, b)
			}
			// A batch's gaps are those before its first frame's object and
			// before every object that starts in it: checked, in order,
			// before the batch is read.
			b.gaps, pendingGaps = append(b.gaps, pendingGaps...), pendingGaps[:0]
			b.end = pos
			b.frames = append(b.frames, &frameTask{owner: o, k: k, off: coff, obj: obj})
			coff += f.USize
			if b.end-b.start >= batchBytes {
				b = nil
			}
		}
	}
	// An object is local to a batch when its first and last frames are in
	// it (its frames are contiguous, and so are a batch's).
	for _, b := range p.batches {
		firstIn := map[*objectState]bool{}
		for _, t := range b.frames {
			if t.k == 0 {
				firstIn[t.obj] = true
			}
		}
		for i, t := range b.frames {
			if t.k != len(im.toc.Entries[t.owner].Frames)-1 || !firstIn[t.obj] {
				continue
			}
			for j := i; j >= 0 && b.frames[j].obj == t.obj; j-- {
				b.frames[j].local = true
			}
		}
	}
	if check.stream {
		p.tail = &gapSpan{pos, im.dataEnd - pos, -1}
		var err error
		if p.sc, err = newStreamCheck(im); err != nil {
			return nil, err
		}
		p.gapReader = bufio.NewReaderSize(nil, 64<<10)
	}
	return p, nil
}

// nextBatch takes the next batch in file order, checks the cpio members
// before it, reads it into *buf (grown once to p.bufSize), feeds the frames
// digests in file order and checks the digest of every object whose last
// frame it holds. It returns nil after the last batch (and the stream's
// tail is checked).
func (im *Image) nextBatch(ctx context.Context, p *batchPlan, buf *[]byte) (*frameBatch, error) {
	b, err := im.readBatch(ctx, p, buf)
	if b == nil || err != nil {
		return nil, err
	}
	// The objects whose frames all lie in b (most objects: small files) are
	// hashed here, outside p.mu: no other batch feeds their digest, and the
	// other worker can take the next batch meanwhile.
	return b, im.hashFrames(b, true)
}

// readBatch is nextBatch's part under p.mu: the image is read as one
// sequential stream, and the digests of objects spread over several batches
// are fed in file order.
func (im *Image) readBatch(ctx context.Context, p *batchPlan, buf *[]byte) (*frameBatch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	if p.next == len(p.batches) {
		if p.tail != nil {
			t := p.tail
			p.tail = nil
			return nil, im.checkGap(p, *t)
		}
		return nil, nil
	}
	b := p.batches[p.next]
	p.next++
	for _, g := range b.gaps {
		if err := im.checkGap(p, g); err != nil {
			return nil, err
		}
	}
	if int64(cap(*buf)) < p.bufSize {
		*buf = make([]byte, p.bufSize)
	}
	data := (*buf)[:b.end-b.start]
	t0 := stagetime.Now()
	if n, err := im.r.ReadAt(data, b.start); n < len(data) {
		t := b.frames[0]
		return nil, fmt.Errorf("reading %s frame %d at offset %d: %w (truncated image?)", quote(im.toc.Entries[t.owner].Path), t.k, b.start, err)
	}
	stagetime.Since("workers: read image (pread)", t0, int64(len(data)))
	for _, t := range b.frames {
		f := im.toc.Entries[t.owner].Frames[t.k]
		t.comp = data[f.Offset-b.start : f.Offset-b.start+f.CSize]
	}
	return b, im.hashFrames(b, false)
}

// hashFrames feeds the frames of b to their objects' frames digests, those
// of objects whose frames all lie in b (local) or the others, and checks the
// digest of each such object whose last frame is in b.
func (im *Image) hashFrames(b *frameBatch, local bool) error {
	defer stagetime.Since("workers: hash frames (sha256)", stagetime.Now(), 0)
	for _, t := range b.frames {
		if t.obj.fh == nil || t.local != local {
			continue
		}
		t.obj.fh.Write(t.comp)
		if e := &im.toc.Entries[t.owner]; t.k == len(e.Frames)-1 {
			if got := hex.EncodeToString(t.obj.fh.Sum(nil)); got != e.FramesSHA256 {
				return fmt.Errorf("%s: compressed frames have sha256:%s, the table of contents says sha256:%s (corrupt image)", quote(e.Path), got, e.FramesSHA256)
			}
		}
	}
	return nil
}

// checkGap checks the members in g (streamCheck.gap).
func (im *Image) checkGap(p *batchPlan, g gapSpan) error {
	defer stagetime.Since("workers: check cpio members between objects", stagetime.Now(), g.n)
	p.gapReader.Reset(io.NewSectionReader(im.r, g.from, g.n))
	return p.sc.gap(p.gapReader, g.n, g.o)
}

// decodeTask decodes one frame and passes its content to sink; it returns
// the content size and the (grown) decode buffer.
func (im *Image) decodeTask(dec *zstd.Decoder, t *frameTask, raw []byte, sink objectSink) (int64, []byte, error) {
	t0 := stagetime.Now()
	content, raw, err := im.decodeFrame(dec, t.owner, t.k, t.comp, raw)
	stagetime.Since("workers: decode (zstd)", t0, int64(len(content)))
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
