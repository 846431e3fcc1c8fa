//go:build cgo

package shimfuzz

/*
#cgo CFLAGS: -I${SRCDIR}/.. -O1 -Wall -fno-strict-aliasing
#include <stdlib.h>
#include <string.h>
#include "table.h"
#include "reportfmt.h"
#include "ldcache.h"

struct res {
	int rc, err, rewritten;
	size_t len;
	long ent; // index of the entry (BUNDLED), or -1
};

static int check(const void *tab, size_t len) { return dlb_check(tab, len); }

static struct res resolve(const void *tab, const char *path, int follow, char *out)
{
	struct dlb_res r;
	struct res x = {0, 0, 0, 0, -1};
	memset(&r, 0, sizeof r);
	x.rc = dlb_resolve(tab, NULL, path, follow, out, &r); // NULL: no process to ask (no writes, every directory searchable)
	x.err = r.err;
	x.rewritten = r.rewritten;
	x.len = r.len;
	if (x.rc == DLB_BUNDLED) {
		const struct dlb_header *h = tab;
		x.ent = (long)(r.ent - (const struct dlb_entry *)((const char *)tab + h->entries));
	}
	return x;
}

// listing: the names of p's listing (NUL-separated into out, at most cap
// bytes), or -1 when p is no directory of the table; records dlb_record_name
// refuses are passed over, as the shim does.
static long listing(const void *tab, const char *p, size_t n, char *out, size_t cap)
{
	uint32_t k;
	const struct dlb_record *r = dlb_listing(tab, dlb_lookup(tab, p, n), &k);
	if (!r) return -1;
	size_t o = 0;
	for (uint32_t i = 0; i < k; i++) {
		const char *s = dlb_record_name(tab, &r[i]);
		if (!s || o + r[i].name_len + 1 > cap) continue;
		memcpy(out + o, s, r[i].name_len);
		o += r[i].name_len;
		out[o++] = 0;
	}
	return (long)o;
}

static long lookup(const void *tab, const char *p, size_t n)
{
	const struct dlb_header *h = tab;
	const struct dlb_entry *e = dlb_lookup(tab, p, n);
	return e ? (long)(e - (const struct dlb_entry *)((const char *)tab + h->entries)) : -1;
}

static size_t line(char *out, size_t cap, long long pid, const char *exe, size_t exelen,
		   unsigned long long a, unsigned long long m, unsigned long long p,
		   const char *blob, const size_t *offs, const size_t *lens, const int *absent, unsigned n,
		   unsigned nout, unsigned nfb, const unsigned long long *fbn, unsigned long long dropped)
{
	static const char *const reasons[] = {"written", "written-everything", "no-table", "dirfd"};
	const char *ps[n ? n : 1];
	struct dlb_fallback fb[nfb ? nfb : 1];
	uint64_t c[3] = {a, m, p};
	for (unsigned i = 0; i < n; i++) ps[i] = absent[i] ? NULL : blob + offs[i];
	// the first nfb paths are also the fallbacks' directories, the first
	// nout the "outside" list, the rest "passed_paths"
	for (unsigned i = 0; i < nfb; i++) fb[i] = (struct dlb_fallback){reasons[i % 4], ps[i], lens[i], fbn[i]};
	return dlb_report_line(out, cap, pid, exe, exelen, c, fb, nfb, ps, lens, nout, ps + nout, lens + nout, n - nout, dropped);
}

// ldcache: dlb_ldcache_open then dlb_ldcache_lookup of name: 2 not opened,
// else the lookup's answer, with *at the path's offset in map (rc 1).
static int ldcache(const char *map, size_t size, const char *name, long *at)
{
	struct dlb_ldcache c;
	const char *path = 0;
	if (!dlb_ldcache_open(map, size, &c)) return 2;
	int rc = dlb_ldcache_lookup(&c, name, &path);
	*at = rc == 1 ? (long)(path - map) : -1;
	return rc;
}
*/
import "C"

import (
	"strings"
	"unsafe"
)

// Outcomes of Resolve (table.h).
const (
	Unknown  = int(C.DLB_UNKNOWN)
	Bundled  = int(C.DLB_BUNDLED)
	KnownErr = int(C.DLB_KNOWN_ERR)
	PathMax  = int(C.DLB_PATH_MAX)
	LineMin  = int(C.DLB_REPORT_LINE_MIN)
	ExeMax   = int(C.DLB_REPORT_EXE_MAX)
)

// Table is a table in C memory (malloc: 16-byte aligned, as an mmap is
// page-aligned; under -asan every byte past its end is poisoned).
type Table struct {
	p   unsafe.Pointer
	len int
}

func NewTable(b []byte) *Table { return &Table{C.CBytes(b), len(b)} }
func (t *Table) Free()         { C.free(t.p) }
func (t *Table) Check() bool   { return C.check(t.p, C.size_t(t.len)) != 0 }

// Lookup returns the index of the entry for exactly p, or -1.
func (t *Table) Lookup(p string) int {
	cs := C.CString(p)
	defer C.free(unsafe.Pointer(cs))
	return int(C.lookup(t.p, cs, C.size_t(len(p))))
}

// Listing returns the names of directory p's listing as dlb_listing and
// dlb_record_name read them, or nil when p is no directory of the table.
func (t *Table) Listing(p string) []string {
	cs := C.CString(p)
	defer C.free(unsafe.Pointer(cs))
	const cap = 1 << 16
	out := (*C.char)(C.malloc(cap))
	defer C.free(unsafe.Pointer(out))
	n := int(C.listing(t.p, cs, C.size_t(len(p)), out, cap))
	if n < 0 {
		return nil
	}
	names := []string{}
	for _, s := range strings.Split(C.GoStringN(out, C.int(n)), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names
}

// Result is dlb_resolve's answer.
type Result struct {
	RC, Err   int
	Rewritten bool
	Out       string // the canonical path (Bundled) or the rewritten one
	Entry     int    // Bundled: the entry's index
}

// Resolve runs dlb_resolve on path (which must hold no NUL byte).
func (t *Table) Resolve(path string, follow bool) Result {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	out := (*C.char)(C.malloc(C.size_t(PathMax)))
	defer C.free(unsafe.Pointer(out))
	f := C.int(0)
	if follow {
		f = 1
	}
	x := C.resolve(t.p, cs, f, out)
	r := Result{RC: int(x.rc), Err: int(x.err), Rewritten: x.rewritten != 0, Entry: int(x.ent)}
	if r.RC == Bundled || r.Rewritten {
		r.Out = C.GoStringN(out, C.int(x.len))
	}
	return r
}

// ReportLine runs dlb_report_line with a buffer of cap bytes; the first
// nout paths are the "outside" list, the others "passed_paths"; a nil path
// stands for one claimed but not yet written.
// The first len(fbLookups) paths are also fallbacks' directories, with
// reasons "written", "written-everything", "no-table", "dirfd" in turn.
func ReportLine(cap int, pid int64, exe string, counts [3]uint64, paths []*string, nout int, fbLookups []uint64, dropped uint64) []byte {
	if nout > len(paths) {
		nout = len(paths)
	}
	if len(fbLookups) > len(paths) {
		fbLookups = fbLookups[:len(paths)]
	}
	fbn := make([]C.ulonglong, len(fbLookups)+1)
	for i, v := range fbLookups {
		fbn[i] = C.ulonglong(v)
	}
	buf := C.malloc(C.size_t(cap))
	defer C.free(buf)
	var blob []byte
	n := len(paths)
	offs := make([]C.size_t, n+1)
	lens := make([]C.size_t, n+1)
	absent := make([]C.int, n+1)
	for i, p := range paths {
		if p == nil {
			absent[i] = 1
			continue
		}
		offs[i], lens[i] = C.size_t(len(blob)), C.size_t(len(*p))
		blob = append(blob, *p...)
	}
	cblob := C.CBytes(append(blob, 0))
	defer C.free(cblob)
	cexe := C.CBytes([]byte(exe + "\x00"))
	defer C.free(cexe)
	l := C.line((*C.char)(buf), C.size_t(cap), C.longlong(pid), (*C.char)(cexe), C.size_t(len(exe)),
		C.ulonglong(counts[0]), C.ulonglong(counts[1]), C.ulonglong(counts[2]),
		(*C.char)(cblob), &offs[0], &lens[0], &absent[0], C.unsigned(n), C.unsigned(nout),
		C.unsigned(len(fbLookups)), &fbn[0], C.ulonglong(dropped))
	return C.GoBytes(buf, C.int(l))
}

// LdCacheLookup looks name up in an ld.so.cache image as the audit module
// does (ldcache.h): ok false when dlb_ldcache_open refuses it, else rc 1
// (found, path), 0 (no entry) or -1 (not ours to predict). The image is
// copied to C memory, so -asan catches a read past its end.
func LdCacheLookup(cache []byte, name string) (ok bool, rc int, path string) {
	p := C.CBytes(cache)
	defer C.free(p)
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var at C.long
	r := int(C.ldcache((*C.char)(p), C.size_t(len(cache)), cn, &at))
	if r == 2 {
		return false, 0, ""
	}
	if r == 1 {
		path = C.GoString((*C.char)(unsafe.Add(p, int(at))))
	}
	return true, r, path
}
