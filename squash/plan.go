package squash

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/dirent"
	"github.com/dlbundle/dlbundle/trace"
)

// Options change the bundling policy.
type Options struct {
	Include []string // path prefixes to bundle although a default rule excludes them (/etc, /tmp...)
	Exclude []string // path prefixes never to bundle (recorded as external entries)
	// AllowChanged bundles files that changed since the pilot as they are
	// now, instead of leaving them out.
	AllowChanged bool
	Warn         func(string) // called for every warning (also kept in Report.Warnings)
	// Pilots are header records to keep in the image before the traces'
	// own (build --from: the pilots of the image it starts from).
	Pilots []json.RawMessage
	// Since (Unix ns) is when the inputs that describe the app were made
	// (the image's file, the last pilot's start): a path that only a run's
	// reports name and that was modified later is an output of that run,
	// not part of the app, and is left out (ReasonNewer). 0: no check.
	Since int64
	// StatOnlyMax replaces StatOnlyMaxSize (0: the default): files only
	// stat'd up to this size are bundled, larger ones are external.
	StatOnlyMax int64
	// Own are files dlbundle itself wrote (the image being written, the
	// one folded, the traces and reports read): a listing that gained or
	// lost them since the pilot's is no news.
	Own []string
}

func (o Options) statOnlyMax() int64 {
	if o.StatOnlyMax > 0 {
		return o.StatOnlyMax
	}
	return StatOnlyMaxSize
}

// StatOnlyMaxSize: regular files the pilot only stat'd (Python stats the .py
// of every .pyc it loads) are bundled up to this size, so that the ranks'
// stats are answered from the image, not the shared file system; larger ones
// (data files whose size the app checks) are recorded as external.
const StatOnlyMaxSize = 2 << 20

// ReportedOnlyMaxSize: a regular file that only reports name (build --from;
// no pilot saw it) and that is larger than this stays external unless an
// --include covers it. Reports can come from records another user planted,
// and a 4 GiB sparse file they name would otherwise be bundled into the
// image and staged into every node's memory; no shared library or module
// the fold is for comes near this size.
const ReportedOnlyMaxSize = 256 << 20

// Plan is what the image writer packs: entries in load order.
type Plan struct {
	Entries []image.Entry
	Pilots  []json.RawMessage // the traces' header records, in argument order
	Report  Report
}

// Build merges traces and decides, reading the file system as it is now
// (lstat, readlink, readdir, file headers), which paths the image holds and
// how. See docs/squash.md for the policy.
func Build(traces []*trace.Trace, opts Options) (*Plan, error) {
	rules, err := NewRules(opts.Include, opts.Exclude)
	if err != nil {
		return nil, err
	}
	if len(traces) == 0 {
		return nil, errors.New("no traces to build from")
	}
	b := &builder{opts: opts, rules: rules, fs: newFSView(), index: map[string]int{}, plan: &Plan{}, outputDirs: map[string]bool{}}
	rep := &b.plan.Report
	b.plan.Pilots = append(b.plan.Pilots, opts.Pilots...)
	var pilots []*trace.Trace // the pilot runs' own traces, not made-up ones (from.go)
	for i, t := range traces {
		if t.Header.Format != trace.FormatName {
			continue
		}
		pilots = append(pilots, t)
		h, err := json.Marshal(&t.Header)
		if err != nil {
			return nil, err
		}
		b.plan.Pilots = append(b.plan.Pilots, h)
		if t.End == nil {
			rep.Incomplete = append(rep.Incomplete, fmt.Sprintf("trace %d (%s)", i+1, strings.Join(t.Header.Command, " ")))
		}
	}
	rep.Traces = len(traces)
	for i := 1; i < len(pilots); i++ {
		t := pilots[i]
		if a, b0 := strings.Join(t.Header.Command, " "), strings.Join(pilots[0].Header.Command, " "); a != b0 {
			b.warn("trace %d records another command (%s) than trace 1 (%s); merging them (name the traces to build from only some)", i+2, a, b0)
		}
	}
	b.uses = collect(traces)
	rep.Events = b.uses.events
	rep.Paths = len(b.uses.byPath)
	b.addCatalogs() // after the count: the paths the traces name
	for _, x := range b.uses.inOrder() {
		b.place(x)
	}
	for _, p := range b.statOnlyLarge {
		if b.plan.Entries[b.index[p]].Type == image.TypeExternal {
			b.skip(ReasonStatOnlyLarge)
		}
	}
	for i := range b.plan.Entries {
		b.plan.Entries[i].Order = i
	}
	return b.plan, nil
}

type builder struct {
	opts  Options
	rules *Rules
	fs    *fsView
	uses  *uses
	plan  *Plan
	index map[string]int // path -> position in plan.Entries

	statOnlyLarge []string        // real paths recorded external for their size
	outputDirs    map[string]bool // directories the pilot wrote into: no entry
	nodeBoundSeen map[string]bool // driver libraries met (NodeBound)
	libdlChecked  bool            // addPreloadNeeds ran
}

func (b *builder) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.plan.Report.Warnings = append(b.plan.Report.Warnings, msg)
	if b.opts.Warn != nil {
		b.opts.Warn(msg)
	}
}

func (b *builder) skip(reason string) { b.plan.Report.skip(reason) }

// skipByRule counts p as left out by a prefix rule, and under the prefix
// that --include would take to bundle it (the summary names it).
func (b *builder) skipByRule(reason, p string) {
	if reason == ReasonTempDir && PerRunName(p) != "" {
		b.plan.Report.skip(ReasonPerRun) // no --include to advise: the next run's name differs
		return
	}
	b.plan.Report.skip(reason)
	b.plan.Report.skipUnder(reason, IncludePrefix(p))
}

// place decides what one traced path becomes in the plan.
func (b *builder) place(x *use) {
	existed := x.read || x.dirUse || x.looked
	if !existed && !x.enoent && !x.enotdir && !x.pycWritten && !x.written {
		if x.otherErr != "" {
			b.skip(ReasonOtherError)
		}
		return // only the parent of a written path
	}
	verdict, reason := b.rules.Match(x.path)
	switch {
	case verdict == Skip:
		b.skipByRule(reason, x.path)
		return
	case x.written:
		b.skip(ReasonWritten)
		return
	case verdict == Exclude:
		// Node-local: say that it exists (external entry), never bundle it.
		if w := b.fs.resolve(x.path, false); w.err == nil && existed {
			if v, _ := b.rules.Match(w.final.path); v != Bundle {
				b.addBundleableChain(w) // e.g. /usr/share/locale above locale.alias
				b.addNodeLocal(w.final)
			}
		}
		b.skipByRule(reason, x.path)
		return
	}
	if NodeBound(x.path) && b.nodeBound(x.path) {
		// A driver's library (or the symlink naming it, libcuda.so.1 ->
		// libcuda.so.535.x: the next driver's link names another file):
		// it exists, it is the node's, the shim passes it through.
		if w := b.fs.resolve(x.path, false); w.err == nil && existed {
			b.addBundleableChain(w)
			b.addNodeLocal(w.final)
		}
		return // a failed lookup is not kept either: the next node may have the driver
	}

	w := b.fs.resolve(x.path, true)
	switch {
	case w.err == nil:
		b.placeExisting(x, w)
	case w.err == unix.ENOENT:
		b.placeMissing(x, w)
	case w.err == unix.ENOTDIR:
		b.placeNotDir(x, w)
	default:
		b.warn("%s: %v at build time; left out", x.path, w.err)
		b.skip(ReasonUnreadable)
	}
}

func (b *builder) placeExisting(x *use, w walk) {
	n := w.final
	if !(x.read || x.dirUse || x.looked || x.pycWritten) {
		b.skip(ReasonAppeared) // the pilot saw ENOENT/ENOTDIR: the job will too, or not; pass through
		return
	}
	if x.reported && !x.pilot && b.opts.Since > 0 && unix.TimespecToNsec(n.st.Mtim) > b.opts.Since {
		b.plan.Report.Newer = append(b.plan.Report.Newer, x.path)
		b.skip(ReasonNewer)
		return
	}
	if v, reason := b.rules.Match(n.path); v != Bundle {
		// A symlink that leads into /tmp, /etc...: keep the way there, not the object.
		b.addChain(w)
		if v == Exclude {
			b.addNodeLocal(n)
		}
		b.skipByRule(reason, n.path)
		return
	}
	if NodeBound(n.path) && b.nodeBound(n.path) {
		b.addChain(w) // a symlink of the app's that names a driver library
		b.addNodeLocal(n)
		return
	}
	switch {
	case n.isReg() && x.reported && !x.pilot && n.st.Size > ReportedOnlyMaxSize && !b.rules.Included(n.path):
		b.addChain(w)
		b.addExternal(n)
		b.warn("%s (%d bytes) is named only by reports and larger than 256 MiB: left external (stats and reads go to the file system); --include %s to bundle it", x.path, n.st.Size, x.path)
	case n.isReg() && !x.read && !x.pycWritten && n.st.Size > b.opts.statOnlyMax():
		b.addChain(w)
		b.addExternal(n)
		b.statOnlyLarge = append(b.statOnlyLarge, n.path) // counted at the end: a later use may read it
	case n.isReg():
		if x.pycWritten && !x.read {
			if err := checkPyc(x.path); err != nil {
				b.warn("%v; left out", err)
				b.skip(ReasonStalePyc)
				return
			}
			b.plan.Report.PycCaches = append(b.plan.Report.PycCaches, n.path)
		}
		if changed, was := changedSince(x.openStats, n); changed {
			b.plan.Report.Changed = append(b.plan.Report.Changed, x.path)
			if !b.opts.AllowChanged {
				b.warn("%s changed since the pilot (size %d mtime %d then, size %d mtime %d now); left out",
					x.path, was.size, was.mtimeNS, n.st.Size, unix.TimespecToNsec(n.st.Mtim))
				b.skip(ReasonChanged)
				return
			}
			b.warn("%s changed since the pilot; bundling it as it is now (--allow-changed)", x.path)
		}
		b.addChain(w)
		b.addRegular(n)
		if x.exec {
			b.addInterpreters(n, 0)
		}
	case n.isDir():
		b.addChain(w)
		b.addDir(n)
	default: // a fifo, socket or device
		b.addChain(w)
		b.addExternal(n)
	}
}

// nodeBound decides for a path NodeBound names: true (record, do not
// bundle; counted once per path) unless the user's --include covers it, which
// bundles it with a warning (once per path).
func (b *builder) nodeBound(p string) bool {
	if b.nodeBoundSeen == nil {
		b.nodeBoundSeen = map[string]bool{}
	}
	first := !b.nodeBoundSeen[p]
	b.nodeBoundSeen[p] = true
	if b.rules.Included(p) {
		if first {
			b.warn("%s is the user-space half of a kernel driver and is bundled as --include asks: "+
				"on a node whose driver differs it will not match the kernel module; drop the --include to load the node's", p)
		}
		return false
	}
	if first {
		b.skip(ReasonNodeBound)
		b.plan.Report.NodeBound = append(b.plan.Report.NodeBound, p)
	}
	return true
}

// changedSince compares the size and mtime the tracer saw at each open with now.
func changedSince(seen []openStat, n *node) (bool, openStat) {
	for _, s := range seen {
		if s.size != n.st.Size || s.mtimeNS != unix.TimespecToNsec(n.st.Mtim) {
			return true, s
		}
	}
	return false, openStat{}
}

func (b *builder) placeMissing(x *use, w walk) {
	if x.read || x.dirUse || x.looked {
		if x.looked && !x.read && !x.dirUse {
			// readlink or lstat of what is now a dangling symlink
			if w2 := b.fs.resolve(x.path, false); w2.err == nil && w2.final.isSymlink() {
				b.addChain(w2)
				b.addSymlink(w2.final)
				return
			}
		}
		b.plan.Report.Vanished = append(b.plan.Report.Vanished, x.path)
		b.warn("%s existed during the pilot and does not now (%s is missing); left out", x.path, w.failAt)
		b.skip(ReasonVanished)
		return
	}
	if !x.enoent {
		return // the temporary file of a bytecode cache write, gone as it should be
	}
	// Keep "does not exist" only where the plan holds the complete listing
	// of the directory the name is missing from.
	if v, _ := b.rules.Match(w.failDir); v != Bundle {
		b.skip(ReasonMissingKept)
		return
	}
	dir, err := b.fs.lstat(w.failDir)
	if err != nil || !dir.isDir() {
		b.skip(ReasonMissingKept)
		return
	}
	if u := b.uses.byPath[w.failDir]; u != nil && u.listChanged {
		b.skip(ReasonMissingKept) // its listing is not what the pilot saw
		return
	}
	b.addChain(w)
	e := b.addDir(dir)
	if e == nil || e.Type != image.TypeDir || hasName(e.Listing, w.failAt[len(w.failDir):]) {
		b.skip(ReasonMissingKept)
		return
	}
	b.add(image.Entry{Path: w.failAt, Type: image.TypeMissing})
}

func hasName(listing []image.DirEntry, slashName string) bool {
	name := strings.TrimPrefix(slashName, "/")
	for _, d := range listing {
		if d.Name == name {
			return true
		}
	}
	return false
}

// placeNotDir keeps an ENOTDIR failure reproducible: the loader answers it
// from the regular file that stands where a directory was expected.
func (b *builder) placeNotDir(x *use, w walk) {
	if x.read || x.dirUse || x.looked {
		b.plan.Report.Vanished = append(b.plan.Report.Vanished, x.path)
		b.warn("%s existed during the pilot; now %s is not a directory; left out", x.path, w.failAt)
		b.skip(ReasonVanished)
		return
	}
	f, err := b.fs.lstat(w.failAt)
	if v, _ := b.rules.Match(w.failAt); err != nil || v != Bundle || !x.enotdir {
		b.skip(ReasonMissingKept)
		return
	}
	b.addChain(w)
	switch _, ok := b.index[f.path]; {
	case ok:
	case f.isReg() && f.st.Size <= b.opts.statOnlyMax():
		b.addRegular(f) // bundled like a stat'd-only file, so the loader can answer without the file system
	default:
		b.addExternal(f)
	}
}

// add appends e unless its path is already in the plan; it returns the entry
// in the plan.
func (b *builder) add(e image.Entry) *image.Entry {
	if i, ok := b.index[e.Path]; ok {
		return &b.plan.Entries[i]
	}
	b.index[e.Path] = len(b.plan.Entries)
	b.plan.Entries = append(b.plan.Entries, e)
	return &b.plan.Entries[len(b.plan.Entries)-1]
}

// addChain adds the directories and symlinks a path resolved through, so
// that the loader can answer every lookup along it.
func (b *builder) addChain(w walk) {
	for _, n := range w.chain {
		b.addWayNode(n)
	}
}

// addWayNode adds a directory or symlink met on the way to a path.
func (b *builder) addWayNode(n *node) {
	if n.isSymlink() {
		b.addSymlink(n)
	} else {
		b.addDir(n)
	}
}

// addBundleableChain adds the directories and symlinks on the way to a
// node-local file that the rules allow to bundle (none for /etc/x; /usr/share
// and /usr/share/locale for /usr/share/locale/locale.alias), so that every
// entry's bundleable ancestors are directory entries.
func (b *builder) addBundleableChain(w walk) {
	for _, n := range w.chain {
		if v, _ := b.rules.Match(n.path); v == Bundle {
			b.addWayNode(n)
		}
	}
}

func (b *builder) addSymlink(n *node) {
	e := attrs(n, image.TypeSymlink)
	e.Target = n.target
	b.add(e)
}

func (b *builder) addExternal(n *node) { b.add(attrs(n, image.TypeExternal)) }

// addNodeLocal records that a file under /etc, /tmp... exists, with its
// file type only: its other attributes belong to the node it is on. Node-local
// directories get no entry at all: their listings and attributes change
// without the app's doing (the mtime of /tmp) and would make two builds of the
// same inputs differ, and the image format allows nothing below a
// non-directory entry. Lookups of paths without an entry go to the file system.
func (b *builder) addNodeLocal(n *node) {
	if !n.isDir() {
		b.add(image.Entry{Path: n.path, Type: image.TypeExternal, Mode: n.st.Mode & unix.S_IFMT})
	}
}

// addRegular adds a file to bundle; a path first recorded as external (only
// stat'd) becomes regular when a later use reads it.
func (b *builder) addRegular(n *node) {
	e := attrs(n, image.TypeRegular)
	e.Kind = classify(n.path)
	if i, ok := b.index[n.path]; ok {
		if b.plan.Entries[i].Type == image.TypeExternal {
			b.plan.Entries[i] = e
		}
		return
	}
	b.add(e)
}

// addInterpreters adds the program interpreter of an exec'd file (ELF
// PT_INTERP, ld.so; or a script's #! line), which the kernel opens itself so
// that no trace shows it, and that interpreter's own.
func (b *builder) addInterpreters(n *node, depth int) {
	interp := interpreterOf(n.path)
	if interp == "" || depth > 4 {
		return
	}
	if v, _ := b.rules.Match(interp); v != Bundle {
		return
	}
	if u := b.uses.byPath[interp]; u != nil && u.written {
		return
	}
	w := b.fs.resolve(interp, true)
	if w.err != nil || !w.final.isReg() {
		return
	}
	if v, _ := b.rules.Match(w.final.path); v != Bundle {
		return
	}
	b.addChain(w)
	b.addRegular(w.final)
	b.addPreloadNeeds(w.final)
	b.addInterpreters(w.final, depth+1)
}

// addPreloadNeeds adds the libdl.so.2 of the glibc whose ld.so (the
// interpreter of an exec'd program) the image bundles, when that glibc is
// older than 2.34: the shim's preload object for such a glibc (preload.so,
// loader/stagefmt.DetectPreload) needs libdl.so.2, which the app itself
// may never load, so no trace shows it. On a node with the image's glibc the
// node's copy would do; on a node with another glibc the image's ld.so runs
// the app, and a libdl.so.2 from the node (another glibc build) stops every
// process before main ("version `GLIBC_ABI_DT_RELR' not found"). From 2.34
// dlsym is in libc.so.6 and preload-2.34.so needs nothing more.
func (b *builder) addPreloadNeeds(ldso *node) {
	if b.libdlChecked {
		return
	}
	dir := path.Dir(ldso.path)
	libc := b.fs.resolve(path.Join(dir, "libc.so.6"), true)
	if libc.err != nil || !libc.final.isReg() {
		return // a script's interpreter, not ld.so
	}
	b.libdlChecked = true
	if definesVersion(libc.final.path, "GLIBC_2.34") {
		return
	}
	w := b.fs.resolve(path.Join(dir, "libdl.so.2"), true)
	if w.err != nil || !w.final.isReg() {
		return
	}
	if v, _ := b.rules.Match(w.final.path); v != Bundle {
		return
	}
	b.addChain(w)
	b.addRegular(w.final)
}

// definesVersion reports whether the ELF shared object at p defines the
// symbol version ver (GLIBC_2.34 in libc.so.6: dlsym moved there).
func definesVersion(p, ver string) bool {
	f, err := image.OpenSource(p)
	if err != nil {
		return false
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return false
	}
	defer ef.Close()
	vs, err := ef.DynamicVersions()
	if err != nil {
		return false
	}
	for _, v := range vs {
		if v.Name == ver {
			return true
		}
	}
	return false
}

// addDir adds a directory with its complete listing as read now and returns
// its entry. A directory whose listing is node-local (the prefix rules do not
// bundle it) or cannot be read gets no entry (nil): its lookups go to the
// file system.
func (b *builder) addDir(n *node) *image.Entry {
	if i, ok := b.index[n.path]; ok {
		return &b.plan.Entries[i]
	}
	if v, _ := b.rules.Match(n.path); v != Bundle {
		return nil // an ancestor under /tmp, /etc...
	}
	u := b.uses.byPath[n.path]
	if u != nil && u.listChanged {
		// The pilot created or removed names here: an output directory. Its
		// listing is not the app's to freeze (the loader would answer ENOENT
		// for the job's own new files), so it gets no entry.
		if !b.outputDirs[n.path] {
			b.outputDirs[n.path] = true
			b.plan.Report.OutputDirs = append(b.plan.Report.OutputDirs, n.path)
			b.skip(ReasonDirChanged)
		}
		return nil
	}
	listing, dots, err := ReadListing(n.path)
	if err != nil {
		b.warn("cannot list %s (%v): not in the image, its lookups will go to the file system", n.path, err)
		return nil
	}
	if u != nil && u.pilotListing != nil {
		b.compareListing(n.path, u.pilotListing, listing)
	}
	e := attrs(n, image.TypeDir)
	e.Listing = listing
	e.DotDotIno = dots.DotDotIno
	if dots.Dot != 0 || dots.DotDot != 1 {
		e.Dots = []int{dots.Dot, dots.DotDot}
	}
	return b.add(e)
}

// compareListing warns when a directory's names differ from what the pilot
// listed, other than by the pilot's own writes (bytecode caches): an import
// or library search may now go another way than in the pilot.
func (b *builder) compareListing(dir string, pilot map[string]bool, now []image.DirEntry) {
	var added, gone []string
	nowNames := make(map[string]bool, len(now))
	for _, d := range now {
		nowNames[d.Name] = true
		if !pilot[d.Name] && !b.writtenByPilot(dir+"/"+d.Name) {
			added = append(added, d.Name)
		}
	}
	for name := range pilot {
		if !nowNames[name] && !b.writtenByPilot(dir+"/"+name) {
			gone = append(gone, name)
		}
	}
	if len(added)+len(gone) == 0 {
		return
	}
	sort.Strings(gone)
	b.plan.Report.ListingsChanged = append(b.plan.Report.ListingsChanged, dir)
	b.warn("%s has changed since the pilot listed it (new: %s; gone: %s); the image holds it as it is now: re-run the pilot if that matters",
		dir, nameList(added), nameList(gone))
}

// pilotOutput matches the names of what `dlbundle trace` itself writes into
// its working directory (dlbundle.trace, dlbundle.2.trace, and a rank's
// dlbundle.trace.RANK): the tracer's own writes, not the app's, are in no
// trace, and are no news in a later listing.
var pilotOutput = regexp.MustCompile(`^dlbundle(\.[0-9]+)?\.trace(\.[0-9]+)?$`)

func (b *builder) writtenByPilot(p string) bool {
	if pilotOutput.MatchString(path.Base(p)) {
		return true
	}
	for _, o := range b.opts.Own {
		if path.Clean(o) == path.Clean(p) {
			return true
		}
	}
	u := b.uses.byPath[path.Clean(p)]
	return u != nil && (u.written || u.pycWritten)
}

func nameList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}

// ReadListing reads a directory's names, types and d_ino with getdents(2)
// (os.ReadDir has no inode numbers), opened with O_NOATIME, in the order the
// file system returns them: that order is what the app sees natively (ext4's
// hash order, tmpfs's newest first, xfs's ...) and what the loader serves
// (docs/squash.md, "Listing order"). It also returns where "." and ".."
// came in that order and the d_ino of "..", which a stage cannot find by
// itself when the parent is not in the image (a node-local or unreadable
// parent, a mount point).
func ReadListing(dir string) (listing []image.DirEntry, dots Dots, err error) {
	f, err := image.OpenSource(dir)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, dots, err
	}
	defer f.Close()
	var out []image.DirEntry
	seen := 0 // of "." and ".."
	dots = Dots{Dot: 0, DotDot: 1}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(int(f.Fd()), buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, dots, err
		}
		if n <= 0 {
			break
		}
		for recs := buf[:n]; len(recs) > 0; {
			var rec dirent.Record
			if rec, recs, err = dirent.Next(recs); err != nil {
				return nil, dots, err
			}
			ino, dt, nm := rec.Ino, rec.Type, string(rec.Name)
			switch nm {
			case ".":
				dots.Dot = len(out) + seen
				seen++
				continue
			case "..":
				dots.DotDot, dots.DotDotIno = len(out)+seen, ino
				seen++
				continue
			}
			if dt == unix.DT_UNKNOWN { // some file systems leave the type to lstat
				var st unix.Stat_t
				if unix.Lstat(path.Join(dir, nm), &st) == nil {
					dt = dtOfMode(st.Mode)
				}
			}
			t := image.Type("other")
			switch dt {
			case unix.DT_REG:
				t = image.TypeRegular
			case unix.DT_DIR:
				t = image.TypeDir
			case unix.DT_LNK:
				t = image.TypeSymlink
			}
			out = append(out, image.DirEntry{Name: nm, Type: t, Ino: ino})
		}
	}
	return out, dots, nil
}

// Dots says where a directory read returned "." and ".." (their positions
// among all the names, both counted) and the d_ino of "..".
type Dots struct {
	Dot, DotDot int
	DotDotIno   uint64
}

func dtOfMode(m uint32) uint8 {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFLNK:
		return unix.DT_LNK
	}
	return unix.DT_UNKNOWN
}

// attrs fills an entry from lstat, taken before the build read the object.
// The build reads its sources with O_NOATIME (image.OpenSource), so two
// builds of the same inputs record the same access times.
// Only regular entries have a size (the image's content size); a
// directory's own st_size is DirSize.
func attrs(n *node, t image.Type) image.Entry {
	var size, dirSize int64
	if t == image.TypeRegular {
		size = n.st.Size
	}
	if t == image.TypeDir {
		dirSize = n.st.Size
	}
	return image.Entry{
		Path:    n.path,
		Type:    t,
		Mode:    n.st.Mode,
		Size:    size,
		MtimeNS: unix.TimespecToNsec(n.st.Mtim),
		UID:     n.st.Uid,
		GID:     n.st.Gid,
		Nlink:   uint32(n.st.Nlink),
		Dev:     n.st.Dev,
		Ino:     n.st.Ino,
		CtimeNS: unix.TimespecToNsec(n.st.Ctim),
		AtimeNS: unix.TimespecToNsec(n.st.Atim),
		Blocks:  n.st.Blocks,
		DirSize: dirSize,
	}
}
