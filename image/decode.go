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
	// ahead of the decompressors by a few frames only.
	free := make(chan []byte, 2*workers+1)
	for range cap(free) {
		free <- nil
	}
	tasks := make(chan *frameTask, cap(free))
	var wg sync.WaitGroup
	var progMu sync.Mutex
	var done int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var raw []byte // grows to the largest frame (decodeFrame)
			for t := range tasks {
				if ctx.Err() != nil {
					free <- t.comp
					continue
				}
				content, r, err := im.decodeFrame(t.owner, t.k, t.comp, raw)
				free <- t.comp
				raw = r
				if err == nil {
					// Whichever frame of the object comes first opens its
					// files: creating thousands of small files in parallel.
					t.obj.once.Do(func() { t.obj.beginErr = sink.begin(t.owner) })
					err = t.obj.beginErr
				}
				if err == nil {
					err = sink.write(t.owner, t.off, content)
				}
				if err == nil {
					err = im.frameDone(t, content, sink)
				}
				if err != nil {
					cancel(err)
					continue
				}
				if progress != nil {
					progMu.Lock()
					done += int64(len(content))
					progress(done)
					progMu.Unlock()
				}
			}
		}()
	}

	readErr := func() error {
		defer close(tasks)
		br := bufio.NewReaderSize(io.NewSectionReader(im.r, 0, im.dataEnd), 4<<20)
		var sc *streamCheck
		if check.stream {
			var err error
			if sc, err = newStreamCheck(im); err != nil {
				return err
			}
			defer sc.close()
		}
		var pos int64
		for _, o := range im.owners() {
			e := &im.toc.Entries[o]
			obj := &objectState{pending: map[int][]byte{}}
			if check.content {
				obj.h = sha256.New()
			}
			var fh hash.Hash
			if check.frames {
				fh = sha256.New()
			}
			var coff int64
			for k, f := range e.Frames {
				if k == 0 && sc != nil {
					if err := sc.gap(br, f.Offset-pos, o); err != nil {
						return err
					}
				} else if _, err := br.Discard(int(f.Offset - pos)); err != nil {
					return fmt.Errorf("reading image data at %d: %w (truncated image?)", pos, err)
				}
				var comp []byte
				select {
				case comp = <-free:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				if int64(cap(comp)) < f.CSize {
					comp = make([]byte, max(f.CSize, 2*int64(cap(comp)), 256<<10))
				}
				comp = comp[:f.CSize]
				if _, err := io.ReadFull(br, comp); err != nil {
					return fmt.Errorf("reading %s frame %d at offset %d: %w (truncated image?)", e.Path, k, f.Offset, err)
				}
				pos = f.Offset + f.CSize
				if fh != nil {
					fh.Write(comp)
				}
				tasks <- &frameTask{owner: o, k: k, off: coff, comp: comp, obj: obj}
				coff += f.USize
			}
			if fh != nil {
				if got := hex.EncodeToString(fh.Sum(nil)); got != e.FramesSHA256 {
					return fmt.Errorf("%s: compressed frames have sha256:%s, the table of contents says sha256:%s (corrupt image)", e.Path, got, e.FramesSHA256)
				}
			}
		}
		if sc != nil {
			return sc.gap(br, im.dataEnd-pos, -1)
		}
		return nil
	}()
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return readErr
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
