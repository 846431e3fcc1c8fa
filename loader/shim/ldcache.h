/* ldcache.h — /etc/ld.so.cache, looked up as glibc's ld.so looks it up
 * (elf/dl-cache.c: search_cache and _dl_cache_libcmp, 2.33 to 2.36).
 *
 * Freestanding (no libc; table.h's string helpers): audit.c includes it,
 * and so does the cgo test harness (loader/shim/fuzz), which holds it to `ldconfig -p` on the real
 * cache and fuzzes it under AddressSanitizer.
 *
 * ldconfig sorts the entries in _dl_cache_libcmp's order (descending), and ld.so finds a
 * name by binary search: about 10 entries read of the ~1,000 a Debian cache
 * holds. Reading every entry instead cost 65 us per process on this VM, a
 * tenth of the shim's whole share at start-up. An unsorted (damaged) cache
 * is searched the way ld.so searches it, so the answer is still ld.so's.
 */
#ifndef DLB_LDCACHE_H
#define DLB_LDCACHE_H

#include <stddef.h>
#include <stdint.h>
#include "table.h" /* dlb_memeq */

/* The new format's header (struct cache_file_new) and entry
 * (struct file_entry_new): flags, key, value, osversion, hwcap. */
#define DLB_LDCACHE_MAGIC "glibc-ld.so.cache1.1"
#define DLB_LDCACHE_HEADER 48
#define DLB_LDCACHE_ENTRY 24

/* The flags ld.so accepts (_dl_cache_check_flags: exactly the default ID). */
#if defined(__x86_64__)
#define DLB_LDCACHE_FLAGS 0x0303 /* FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 */
#elif defined(__aarch64__)
#define DLB_LDCACHE_FLAGS 0x0a03 /* FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64 */
#endif

struct dlb_ldcache {
	const char *map; /* the whole file */
	size_t size;
	size_t new_off; /* the new format's header; its string offsets count from here */
	uint32_t n;     /* entries */
};

/* dlb_ldcache_open: 1 when map[0:size] holds the new format, alone or after
 * the old one (ldconfig's compat layout), with every entry inside the file;
 * 0 otherwise (ld.so then uses no cache answer we can predict). */
static int dlb_ldcache_open(const char *map, size_t size, struct dlb_ldcache *c)
{
	size_t off = 0;
	if (size >= 16 && dlb_memeq(map, "ld.so-1.7.0", 11)) {
		uint32_t n = *(const uint32_t *)(map + 12);
		off = (16 + (size_t)n * 12 + 7) & ~(size_t)7; /* the old entries, then the new header, 8-aligned */
	}
	if (size < DLB_LDCACHE_HEADER || off > size - DLB_LDCACHE_HEADER) return 0;
	if (!dlb_memeq(map + off, DLB_LDCACHE_MAGIC, sizeof DLB_LDCACHE_MAGIC - 1)) return 0;
	uint32_t n = *(const uint32_t *)(map + off + 20);
	if ((size_t)n > (size - off - DLB_LDCACHE_HEADER) / DLB_LDCACHE_ENTRY) return 0;
	c->map = map;
	c->size = size;
	c->new_off = off;
	c->n = n;
	return 1;
}

/* dlb_ldcache_str: the NUL-terminated string at offset o (from the new
 * header), or NULL when it runs off the file (ld.so trusts the NUL; we do
 * not read past the mapping). */
static const char *dlb_ldcache_str(const struct dlb_ldcache *c, uint32_t o)
{
	size_t at = c->new_off + o;
	if (at < c->new_off || at >= c->size) return 0;
	for (size_t i = at; i < c->size; i++)
		if (c->map[i] == 0) return c->map + at;
	return 0;
}

static const char *dlb_ldcache_entry(const struct dlb_ldcache *c, long i)
{
	return c->map + c->new_off + DLB_LDCACHE_HEADER + (size_t)i * DLB_LDCACHE_ENTRY;
}

/* dlb_ldcache_libcmp is _dl_cache_libcmp: bytes compare as bytes, except
 * that runs of digits compare as numbers (libfoo.so.9 < libfoo.so.10), in
 * the same int arithmetic (unsigned here: wrapping, not undefined). */
static int dlb_ldcache_libcmp(const char *p1, const char *p2)
{
	while (*p1 != 0) {
		if (*p1 >= '0' && *p1 <= '9') {
			if (!(*p2 >= '0' && *p2 <= '9')) return 1;
			unsigned v1 = (unsigned)(*p1++ - '0'), v2 = (unsigned)(*p2++ - '0');
			while (*p1 >= '0' && *p1 <= '9') v1 = v1 * 10 + (unsigned)(*p1++ - '0');
			while (*p2 >= '0' && *p2 <= '9') v2 = v2 * 10 + (unsigned)(*p2++ - '0');
			if (v1 != v2) return (int)(v1 - v2);
		} else if (*p2 >= '0' && *p2 <= '9') {
			return -1;
		} else if (*p1 != *p2) {
			return *p1 - *p2;
		} else {
			p1++;
			p2++;
		}
	}
	return *p1 - *p2;
}

/* dlb_ldcache_cmp compares name with entry i's key; *bad is set when the
 * key runs off the file (ld.so gives up the cache there). */
static int dlb_ldcache_cmp(const struct dlb_ldcache *c, long i, const char *name, int *bad)
{
	const char *key = dlb_ldcache_str(c, *(const uint32_t *)(dlb_ldcache_entry(c, i) + 4));
	if (!key) { *bad = 1; return 0; }
	return dlb_ldcache_libcmp(name, key);
}

/* dlb_ldcache_lookup: 1 and *path when the cache names one file for name
 * (the first entry of our flags among the run of equal keys that ld.so's
 * binary search lands in), 0 when it names none, -1 when the answer is not
 * ours to predict: an entry with hwcaps (ld.so picks by the CPU) or a
 * string off the end of the file. */
static int dlb_ldcache_lookup(const struct dlb_ldcache *c, const char *name, const char **path)
{
#ifndef DLB_LDCACHE_FLAGS
	(void)c; (void)name; (void)path;
	return -1;
#else
	long left = 0, right = (long)c->n - 1;
	int bad = 0;
	while (left <= right) {
		long mid = (left + right) / 2;
		int cmp = dlb_ldcache_cmp(c, mid, name, &bad);
		if (bad) return -1;
		/* ldconfig sorts in descending order: a name below the key lies
		 * further on */
		if (cmp < 0) { left = mid + 1; continue; }
		if (cmp > 0) { right = mid - 1; continue; }
		/* Found: back up to the run's first entry, then read it to its
		 * end, no further than right, as search_cache does. */
		long i = mid;
		while (i > 0 && dlb_ldcache_cmp(c, i - 1, name, &bad) == 0 && !bad) i--;
		if (bad) return -1;
		const char *first = 0;
		for (; i <= right; i++) {
			if (i > mid && (dlb_ldcache_cmp(c, i, name, &bad) != 0 || bad)) break;
			const char *e = dlb_ldcache_entry(c, i);
			if (*(const uint64_t *)(e + 16) != 0) return -1;
			if (*(const int32_t *)e != DLB_LDCACHE_FLAGS || first) continue;
			if (!(first = dlb_ldcache_str(c, *(const uint32_t *)(e + 8)))) return -1;
		}
		if (bad) return -1;
		*path = first;
		return first ? 1 : 0;
	}
	return 0;
#endif
}

#endif
