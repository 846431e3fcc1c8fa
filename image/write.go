package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/u-root/pkg/cpio"
)

// WriteOptions tune Write.
type WriteOptions struct {
	Level    int                     // zstd level as in the zstd CLI (1..19); 0 = default (3)
	Workers  int                     // parallel compressors; 0 = runtime.NumCPU()
	Pilots   []json.RawMessage       // trace header records of the pilot run(s), stored verbatim
	Build    map[string]string       // build info (dlbundle version, host, ...), stored in the TOC
	Progress func(done, total int64) // input bytes processed; may be nil
	Warn     func(msg string)        // non-fatal problems (file > 4 GiB left out, ...); may be nil
}

// WriteStats summarises a written image.
type WriteStats struct {
	Entries, Objects int    // TOC entries; regular files whose content is stored
	RawBytes         int64  // content bytes of all regular entries
	StoredBytes      int64  // bytes of the image file
	DedupedBytes     int64  // content bytes not stored because identical content was
	Arch             string // the image's architecture (docs/SPEC.md 1.5)
}

// Write packs entries (in load order) into w. Regular files are read from
// SourcePath (or Path); their SHA256 and Frames are computed here. Same input
// => byte-identical output (reproducible builds). A regular file whose size
// differs from e.Size when read fails the write with an error naming the path.
func Write(w io.Writer, entries []Entry, opts WriteOptions) (WriteStats, error) {
	var st WriteStats
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	level := opts.Level
	if level == 0 {
		level = 3
	}
	if level < 1 || level > 22 {
		return st, fmt.Errorf("zstd level %d out of range; use 1..19", level)
	}
	es := representable(entries, opts.Warn)
	if err := prepareEntries(es, opts.Warn); err != nil {
		return st, err
	}
	enc, err := encoderFor(level, workers)
	if err != nil {
		return st, err
	}

	links, err := findDuplicates(es, workers)
	if err != nil {
		return st, err
	}
	p := &packer{es: es, links: links, enc: enc, opts: opts, out: &countingWriter{w: w}, elf: make([]elfIdent, len(es))}
	for i := range es { // progress counts the bytes read: content stored once
		if l, dup := links[i]; es[i].Type == TypeRegular && (!dup || l.owner == i) {
			p.total += es[i].Size
		}
	}
	if err := p.run(workers); err != nil {
		return st, err
	}
	for i, ls := range links {
		if ls.owner == i && es[i].SHA256 != ls.sum {
			return st, fmt.Errorf("%s: content changed while the image was written; rebuild", quote(es[i].Path))
		}
	}
	for i := range es {
		if es[i].Type != TypeRegular {
			continue
		}
		st.RawBytes += es[i].Size
		if l, ok := links[i]; ok && l.owner != i {
			es[i].Frames, es[i].FramesSHA256 = es[l.owner].Frames, es[l.owner].FramesSHA256
			st.DedupedBytes += es[i].Size
		} else if es[i].Size > 0 {
			st.Objects++
		}
	}
	arch := p.arch(opts.Warn)
	if err := writeTOC(p.out, enc, &toc{DataEnd: p.out.n, Arch: arch, Entries: es, Pilots: opts.Pilots, Build: opts.Build}); err != nil {
		return st, err
	}
	st.Entries, st.Arch = len(es), arch
	st.StoredBytes = p.out.n
	return st, nil
}

// Encoders are kept per (level, workers): creating one allocates its
// history buffers anew (tens of MB), and EncodeAll is safe for concurrent use.
var (
	encodersMu sync.Mutex
	encoders   = map[[2]int]*zstd.Encoder{}
)

func encoderFor(level, workers int) (*zstd.Encoder, error) {
	encodersMu.Lock()
	defer encodersMu.Unlock()
	key := [2]int{level, workers}
	if e := encoders[key]; e != nil {
		return e, nil
	}
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
		zstd.WithEncoderConcurrency(workers),
		zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, err
	}
	encoders[key] = e
	return e, nil
}

// representable copies the entries an image can hold: a path longer than
// MaxPathLen (its staged copy would not fit PATH_MAX) is left out with a
// warning, as is everything below it; lookups of a path the image does not
// know go to the file system.
func representable(entries []Entry, warn func(string)) []Entry {
	es := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if len(e.Path) > MaxPathLen {
			if warn != nil {
				warn(fmt.Sprintf("%s...: a path of %d bytes is longer than the %d an image holds (its staged copy would not fit PATH_MAX); left out (lookups of it go to the file system)",
					quote(e.Path[:64]), len(e.Path), MaxPathLen))
			}
			continue
		}
		es = append(es, e)
	}
	return es
}

// prepareEntries checks the writer's input and normalises it in place: load
// order numbers, regular files too large for cpio become external.
func prepareEntries(es []Entry, warn func(string)) error {
	// The reader's limits (docs/SPEC.md 3.2), before any content is read.
	names := 0
	for i := range es {
		names += len(es[i].Listing)
	}
	if len(es) > maxEntries || names > maxNames {
		return fmt.Errorf("the load plan has %d entries and %d listed names; an image holds at most %d and %d (docs/SPEC.md 3.2): trace a narrower start-up or exclude prefixes", len(es), names, maxEntries, maxNames)
	}
	seen := make(map[string]bool, len(es))
	for i := range es {
		e := &es[i]
		if err := checkPath(e.Path); err != nil {
			return fmt.Errorf("entry %d: %v", i, err)
		}
		if seen[e.Path] {
			return fmt.Errorf("entry %d: path %s appears twice; the load plan must list each path once", i, quote(e.Path))
		}
		seen[e.Path] = true
		e.Order = i
		e.Frames, e.SHA256, e.FramesSHA256 = nil, "", ""
		if e.Mode&sIFMT == 0 {
			e.Mode |= typeBits(e.Type)
		}
		switch e.Type {
		case TypeRegular:
			if e.Size < 0 {
				return fmt.Errorf("%s: negative size %d", quote(e.Path), e.Size)
			}
			if e.Size > maxCpioSize {
				if warn != nil {
					warn(fmt.Sprintf("%s: %d bytes is over the 4 GiB cpio newc limit; left out of the image (recorded as external: lookups go to the file system)", quote(e.Path), e.Size))
				}
				e.Type, e.Kind, e.Size = TypeExternal, "", 0
			}
		case TypeDir, TypeSymlink, TypeMissing, TypeExternal:
		default:
			return fmt.Errorf("%s: unknown entry type %q", quote(e.Path), e.Type)
		}
		if e.Path == "/" && e.Type != TypeDir {
			return fmt.Errorf("/ must be a directory entry, not %s", e.Type)
		}
		if e.Type != TypeDir && (len(e.Listing) > 0 || len(e.Dots) > 0 || e.DotDotIno != 0) {
			return fmt.Errorf("%s: a %s entry has a listing or positions of . and ..; only a directory has them", quote(e.Path), e.Type)
		}
	}
	return nil
}

// linkSet groups regular entries with identical content: owner stores the
// frames, every member of the set shares them (a newc hard-link set).
type linkSet struct {
	owner int
	names int    // number of paths
	ino   uint64 // cpio inode number, assigned in member order
	sum   string // hex sha256 found by the pre-pass
}

// findDuplicates hashes the regular files that share a size with another one
// (only those can be duplicates) and returns the link set of each of them.
func findDuplicates(es []Entry, workers int) (map[int]*linkSet, error) {
	bySize := map[int64][]int{}
	for i := range es {
		if es[i].Type == TypeRegular && es[i].Size > 0 {
			bySize[es[i].Size] = append(bySize[es[i].Size], i)
		}
	}
	var cand []int
	for _, idx := range bySize {
		if len(idx) > 1 {
			cand = append(cand, idx...)
		}
	}
	sort.Ints(cand)
	sums := make([]string, len(cand))
	errs := make([]error, len(cand))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				sums[k], errs[k] = hashFile(&es[cand[k]])
			}
		}()
	}
	for k := range cand {
		next <- k
	}
	close(next)
	wg.Wait()
	links := map[int]*linkSet{}
	bySum := map[string]*linkSet{}
	for k, i := range cand {
		if errs[k] != nil {
			return nil, errs[k]
		}
		key := fmt.Sprintf("%d:%s", es[i].Size, sums[k])
		ls := bySum[key]
		if ls == nil {
			ls = &linkSet{owner: i, sum: sums[k]}
			bySum[key] = ls
		}
		ls.names++
		links[i] = ls
	}
	for i, ls := range links {
		if ls.names == 1 {
			delete(links, i)
		}
	}
	return links, nil
}

func sourcePath(e *Entry) string {
	if e.SourcePath != "" {
		return e.SourcePath
	}
	return e.Path
}

func hashFile(e *Entry) (string, error) {
	f, err := OpenSource(sourcePath(e))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", quote(e.Path), err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", quote(e.Path), err)
	}
	if n != e.Size {
		return "", sizeChanged(e, n)
	}
	if err := SameSource(f, e); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sizeChanged(e *Entry, n int64) error {
	return fmt.Errorf("%s: %d bytes when read, the load plan says %d: the file changed since the pilot run; re-run the pilot (dlbundle trace) or rebuild", quote(e.Path), n, e.Size)
}

// packer turns entries into compressed frames: one goroutine walks the
// entries in load order and cuts frames (workers read small files themselves),
// workers compress them, and run writes them out in order, recording each
// object's frames.
type packer struct {
	es    []Entry
	links map[int]*linkSet
	enc   *zstd.Encoder
	opts  WriteOptions
	out   *countingWriter
	total int64
	done  int64
	ino   uint64
	elf   []elfIdent // per entry: the ELF header fields of its content (arch.go)
}

// frameJob is one data frame: raw is the cpio bytes, usize the content bytes.
// A job with hdr set is a whole small object that the worker reads itself
// (so that reading and hashing the many small files run on all cores).
type frameJob struct {
	raw    []byte
	comp   []byte
	owner  int // entry index whose Frames this frame extends, or -1
	usize  int64
	ready  chan struct{}
	inSize int64  // content bytes read for it (progress)
	hdr    []byte // read es[owner] in the worker, after this cpio header
	err    error
}

func (p *packer) run(workers int) error {
	jobs := make(chan *frameJob, workers)
	ordered := make(chan *frameJob, 2*workers+2)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if j.hdr != nil {
					if j.raw, j.err = p.readSmall(j.owner, j.hdr); j.err != nil {
						close(j.ready)
						continue
					}
				}
				j.comp = p.enc.EncodeAll(j.raw, getBuf(len(j.raw)/2+64))
				putBuf(j.raw)
				j.raw = nil
				close(j.ready)
			}
		}()
	}
	stop := make(chan struct{})
	prodErr := make(chan error, 1)
	go func() {
		defer close(ordered)
		defer close(jobs)
		emit := func(j *frameJob) bool {
			j.ready = make(chan struct{})
			select {
			case ordered <- j:
			case <-stop:
				return false
			}
			jobs <- j
			return true
		}
		prodErr <- p.produce(emit)
	}()
	var werr error
	// Each object's frames are contiguous and in order: hash them as written.
	cur, curHash := -1, sha256.New()
	finish := func() {
		if cur >= 0 {
			p.es[cur].FramesSHA256 = hex.EncodeToString(curHash.Sum(nil))
			cur = -1
		}
	}
	for j := range ordered {
		<-j.ready
		if werr != nil {
			continue
		}
		if j.err != nil {
			werr = j.err
			close(stop)
			continue
		}
		off := p.out.n
		if _, err := p.out.Write(j.comp); err != nil {
			werr = fmt.Errorf("writing image: %w", err)
			close(stop)
			continue
		}
		if j.owner != cur {
			finish()
		}
		if j.owner >= 0 {
			e := &p.es[j.owner]
			e.Frames = append(e.Frames, Frame{Offset: off, CSize: int64(len(j.comp)), USize: j.usize})
			if cur < 0 {
				cur = j.owner
				curHash.Reset()
			}
			curHash.Write(j.comp)
		}
		putBuf(j.comp)
		j.comp = nil
		if j.inSize > 0 && p.opts.Progress != nil {
			p.done += j.inSize
			p.opts.Progress(p.done, p.total)
		}
	}
	finish()
	wg.Wait()
	if err := <-prodErr; err != nil && werr == nil {
		werr = err
	}
	return werr
}

var errStopped = errors.New("stopped")

// produce walks the entries in load order and emits frames.
func (p *packer) produce(emit func(*frameJob) bool) error {
	var meta bytes.Buffer
	flushMeta := func() error {
		if meta.Len() == 0 {
			return nil
		}
		raw := append([]byte(nil), meta.Bytes()...)
		meta.Reset()
		if !emit(&frameJob{raw: raw, owner: -1}) {
			return errStopped
		}
		return nil
	}
	addMeta := func(info cpio.Info, data []byte) error {
		b, err := metaMember(info, data)
		if err != nil {
			return err
		}
		meta.Write(b)
		if meta.Len() >= maxFrameContent {
			return flushMeta()
		}
		return nil
	}
	for i := range p.es {
		e := &p.es[i]
		var err error
		switch e.Type {
		case TypeDir:
			if e.Path != "/" {
				p.ino++
				err = addMeta(cpioInfo(e, p.ino, 2, 0), nil)
			}
		case TypeSymlink:
			if e.Target == "" || len(e.Target) > 4095 || bytes.IndexByte([]byte(e.Target), 0) >= 0 {
				return fmt.Errorf("%s: symlink target %q is empty, too long or holds NUL", quote(e.Path), e.Target)
			}
			p.ino++
			err = addMeta(cpioInfo(e, p.ino, 1, int64(len(e.Target))), []byte(e.Target))
		case TypeRegular:
			ls := p.links[i]
			switch {
			case e.Size == 0:
				if err = checkEmpty(e); err != nil {
					return err
				}
				e.SHA256 = hex.EncodeToString(sha256.New().Sum(nil))
				p.ino++
				err = addMeta(cpioInfo(e, p.ino, 1, 0), nil)
			case ls != nil && ls.owner != i:
				// A later name of shared content: a newc hard link without data.
				e.SHA256 = ls.sum
				err = addMeta(cpioInfo(e, ls.ino, uint64(ls.names), 0), nil)
			default:
				if err = flushMeta(); err != nil {
					return err
				}
				p.ino++
				nlink := uint64(1)
				if ls != nil {
					ls.ino, nlink = p.ino, uint64(ls.names)
				}
				info := cpioInfo(e, p.ino, nlink, e.Size)
				if e.Size <= maxFrameContent {
					if !emit(&frameJob{owner: i, usize: e.Size, inSize: e.Size, hdr: cpioHeader(info)}) {
						return errStopped
					}
				} else {
					err = p.object(i, info, emit)
				}
			}
		}
		if err != nil {
			return err
		}
	}
	if err := flushMeta(); err != nil {
		return err
	}
	t, err := trailer()
	if err != nil {
		return err
	}
	if !emit(&frameJob{raw: t, owner: -1}) {
		return errStopped
	}
	return nil
}

// object emits the frames of regular file es[i]: the cpio header and the first
// content bytes in the first frame, then up to maxFrameContent bytes a frame,
// the member's padding in the last one. It hashes the content on the way.
func (p *packer) object(i int, info cpio.Info, emit func(*frameJob) bool) error {
	e := &p.es[i]
	hdr := cpioHeader(info)
	f, err := OpenSource(sourcePath(e))
	if err != nil {
		return fmt.Errorf("reading %s: %w", quote(e.Path), err)
	}
	defer f.Close()
	h := sha256.New()
	var read int64
	first := true
	for first || read < e.Size {
		n := min(e.Size-read, maxFrameContent)
		var buf []byte
		if first {
			buf = getBuf(len(hdr) + int(n) + 3)[:len(hdr)+int(n)]
			copy(buf, hdr)
		} else {
			buf = getBuf(int(n) + 3)[:n]
		}
		content := buf[len(buf)-int(n):]
		if m, err := io.ReadFull(f, content); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return sizeChanged(e, read+int64(m))
			}
			return fmt.Errorf("reading %s: %w", quote(e.Path), err)
		}
		if first {
			p.elf[i] = readELFIdent(content)
		}
		h.Write(content)
		read += n
		if read == e.Size {
			if extra, _ := f.Read(make([]byte, 1)); extra > 0 {
				return sizeChanged(e, read+1+countRest(f))
			}
			if err := SameSource(f, e); err != nil {
				return err
			}
			buf = append(buf, make([]byte, round4(e.Size)-e.Size)...) // within capacity
			e.SHA256 = hex.EncodeToString(h.Sum(nil))
		}
		first = false
		if !emit(&frameJob{raw: buf, owner: i, usize: n, inSize: n}) {
			return errStopped
		}
	}
	return nil
}

// readSmall reads object es[i] (one frame) into a buffer after hdr, checks
// its size, hashes it and pads the member.
func (p *packer) readSmall(i int, hdr []byte) ([]byte, error) {
	e := &p.es[i]
	f, err := OpenSource(sourcePath(e))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", quote(e.Path), err)
	}
	defer f.Close()
	n := len(hdr) + int(e.Size)
	buf := getBuf(n + 4)[:n+1] // one byte more: a file that grew reads into it
	copy(buf, hdr)
	m, err := io.ReadFull(f, buf[len(hdr):])
	switch {
	case err == nil: // n+1 bytes: longer than planned
		return nil, sizeChanged(e, e.Size+1+countRest(f))
	case err != io.ErrUnexpectedEOF && err != io.EOF:
		return nil, fmt.Errorf("reading %s: %w", quote(e.Path), err)
	case int64(m) != e.Size:
		return nil, sizeChanged(e, int64(m))
	}
	if err := SameSource(f, e); err != nil {
		return nil, err
	}
	buf = buf[:n]
	p.elf[i] = readELFIdent(buf[len(hdr):])
	sum := sha256.Sum256(buf[len(hdr):])
	e.SHA256 = hex.EncodeToString(sum[:])
	return append(buf, make([]byte, round4(e.Size)-e.Size)...), nil
}

// checkEmpty fails when a file planned as empty has content now.
func checkEmpty(e *Entry) error {
	f, err := OpenSource(sourcePath(e))
	if err != nil {
		return fmt.Errorf("reading %s: %w", quote(e.Path), err)
	}
	defer f.Close()
	if n, _ := f.Read(make([]byte, 1)); n > 0 {
		return sizeChanged(e, 1+countRest(f))
	}
	return SameSource(f, e)
}

func countRest(f *os.File) int64 {
	n, _ := io.Copy(io.Discard, f)
	return n
}

// writeTOC appends the TOC frame and the footer.
func writeTOC(out *countingWriter, enc *zstd.Encoder, t *toc) error {
	h, body, err := encodeTOC(t)
	if err != nil {
		return fmt.Errorf("load plan gives an invalid image: %w", err)
	}
	// The writer's output must pass the reader's checks: catch a bad load
	// plan (a name listed twice, an entry below a symlink, too many
	// entries, ...) here, not on 1,000 nodes. The reader decodes the very
	// bytes written.
	hb := h.marshal()
	if _, err := parseTOCHeader(hb, t.DataEnd); err != nil {
		return fmt.Errorf("load plan gives an invalid image: %w", err)
	}
	if err := (&Image{dataEnd: t.DataEnd}).load(&h, body); err != nil {
		return fmt.Errorf("load plan gives an invalid image: %w", err)
	}
	payload := enc.EncodeAll(body, hb)
	off := out.n
	frame := append(skippableHeader(tocFrameMagic, len(payload)), payload...)
	if _, err := out.Write(frame); err != nil {
		return fmt.Errorf("writing image: %w", err)
	}
	ft := footer{Version: FormatVersion, TOCOffset: off, TOCLength: int64(len(frame)), TOCSHA256: sha256.Sum256(payload)}
	if _, err := out.Write(ft.marshal()); err != nil {
		return fmt.Errorf("writing image: %w", err)
	}
	return nil
}

// Frame buffers are recycled (allocating and zeroing ~1 GB per GB of input
// showed up in profiles): a pool for small frames and one for full ones.
const smallBuf = 256 << 10

var smallBufs, largeBufs sync.Pool

func getBuf(n int) []byte {
	pool, c := &smallBufs, smallBuf
	if n > smallBuf {
		pool, c = &largeBufs, maxFrameContent+64<<10
	}
	if b, ok := pool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, max(n, c))
}

func putBuf(b []byte) {
	switch c := cap(b); {
	case c == smallBuf:
		smallBufs.Put(&b)
	case c == maxFrameContent+64<<10:
		largeBufs.Put(&b)
	}
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
