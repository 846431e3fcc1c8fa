/* reportfmt.h — the report line writer (report.c), on its own so that it can
 * be fuzzed (loader/shim/fuzz). No libc, no allocation, async-signal-safe:
 * it runs in _exit, which may be called from a signal handler.
 *
 * One line: {"pid":N,"exe":S,"answered":N,"missing":N,"passed":N,
 *            "fallbacks":[{"reason":S,"dir":S,"lookups":N},...],
 *            "outside":[S,...],"passed_paths":[S,...],"dropped":N}\n
 * Always valid JSON, never longer than the buffer: a path or fallback that
 * does not fit is left out and counted in "dropped". "fallbacks" (lookups
 * passed through for a reason other than the image lacking the path,
 * docs/loader.md) come first of the lists. "outside" (libraries ld.so loaded
 * from outside the image) comes first: there are few, and they matter most. Strings are escaped as JSON requires
 * ('"', '\\', control characters); JSON text is UTF-8 and paths are bytes, so
 * a byte that is not part of valid UTF-8 is written as U+FFFD, as Go's
 * encoding/json does.
 */
#ifndef DLB_REPORTFMT_H
#define DLB_REPORTFMT_H

#include <stddef.h>
#include <stdint.h>

/* The smallest buffer dlb_report_line accepts: the fixed fields with an exe
 * name of up to 4095 bytes, each escaped to at most 6 bytes. */
#define DLB_REPORT_EXE_MAX 4095
#define DLB_REPORT_LINE_MIN (6 * DLB_REPORT_EXE_MAX + 512)

struct dlb_jw {
	char *b;
	size_t cap, n;
};

static inline void dlb_jw_raw(struct dlb_jw *w, const char *s)
{
	while (*s && w->n < w->cap) w->b[w->n++] = *s++;
}

static inline void dlb_jw_u64(struct dlb_jw *w, uint64_t v)
{
	char d[20];
	int i = 0;
	do { d[i++] = (char)('0' + v % 10); v /= 10; } while (v);
	while (i && w->n < w->cap) w->b[w->n++] = d[--i];
}

/* dlb_utf8_len returns the length of the valid UTF-8 sequence at s[0:n]
 * (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF), or 0. */
static inline size_t dlb_utf8_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	if (c < 0x80) return 1;
	size_t l;
	unsigned lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf) l = 2;
	else if (c >= 0xe0 && c <= 0xef) { l = 3; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
	else if (c >= 0xf0 && c <= 0xf4) { l = 4; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
	else return 0;
	if (n < l || s[1] < lo || s[1] > hi) return 0;
	for (size_t i = 2; i < l; i++)
		if (s[i] < 0x80 || s[i] > 0xbf) return 0;
	return l;
}

/* dlb_json_size is the length of s[0:n] as a JSON string, quotes included. */
static inline size_t dlb_json_size(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t out = 2;
	for (size_t i = 0; i < n;) {
		unsigned c = u[i];
		if (c == '"' || c == '\\') { out += 2; i++; }
		else if (c < 0x20) { out += 6; i++; }
		else if (c < 0x80) { out++; i++; }
		else {
			size_t l = dlb_utf8_len(u + i, n - i);
			if (l) { out += l; i += l; }
			else { out += 6; i++; }
		}
	}
	return out;
}

/* dlb_jw_str appends s[0:n] as a JSON string; the caller has checked that
 * dlb_json_size(s, n) bytes fit. */
static inline void dlb_jw_str(struct dlb_jw *w, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)s;
	char *b = w->b;
	size_t o = w->n;
	b[o++] = '"';
	for (size_t i = 0; i < n;) {
		unsigned c = u[i];
		if (c == '"' || c == '\\') { b[o++] = '\\'; b[o++] = (char)c; i++; }
		else if (c < 0x20) {
			b[o++] = '\\'; b[o++] = 'u'; b[o++] = '0'; b[o++] = '0';
			b[o++] = hex[c >> 4]; b[o++] = hex[c & 15];
			i++;
		} else if (c < 0x80) { b[o++] = (char)c; i++; }
		else {
			size_t l = dlb_utf8_len(u + i, n - i);
			if (l) { for (size_t k = 0; k < l; k++) b[o++] = (char)u[i + k]; i += l; }
			else { const char *r = "\\ufffd"; for (int k = 0; k < 6; k++) b[o++] = r[k]; i++; }
		}
	}
	b[o++] = '"';
	w->n = o;
}

/* The tail written after the paths: ],"dropped":<up to 20 digits>}\n */
#define DLB_REPORT_TAIL (12 + 20 + 2)
/* What follows the "outside" list: ],"passed_paths":[ and the tail. */
#define DLB_REPORT_MID (18 + DLB_REPORT_TAIL)

/* dlb_jw_list appends the paths that fit, comma-separated, keeping reserve
 * bytes free for what follows; it returns how many it left out (NULL paths:
 * claimed but never written, see below). */
static inline uint64_t dlb_jw_list(struct dlb_jw *w, const char *const *paths, const size_t *lens, uint32_t n,
				   size_t reserve)
{
	uint64_t left = 0;
	int first = 1;
	for (uint32_t i = 0; i < n; i++) {
		if (!paths[i]) { left++; continue; }
		size_t need = dlb_json_size(paths[i], lens[i]) + !first;
		if (w->n + need + reserve > w->cap) { left++; continue; }
		if (!first) w->b[w->n++] = ',';
		dlb_jw_str(w, paths[i], lens[i]);
		first = 0;
	}
	return left;
}

/* A fallback reason and directory, with the lookups passed through for it;
 * reason is a short ASCII word (no escaping). */
struct dlb_fallback {
	const char *reason, *dir; /* dir NULL: claimed but not yet written (left out) */
	size_t dirlen;
	uint64_t lookups;
};

/* What follows the "fallbacks" list: ],"outside":[ and the rest. */
#define DLB_REPORT_AFTER_FB (13 + DLB_REPORT_MID)

static inline uint64_t dlb_jw_fallbacks(struct dlb_jw *w, const struct dlb_fallback *fb, uint32_t n, size_t reserve)
{
	uint64_t left = 0;
	int first = 1;
	for (uint32_t i = 0; i < n; i++) {
		size_t rl = 0;
		while (fb[i].reason && fb[i].reason[rl]) rl++;
		/* {"reason":"R","dir":D,"lookups":N} */
		size_t need = 12 + rl + 8 + (fb[i].dir ? dlb_json_size(fb[i].dir, fb[i].dirlen) : 0) + 11 + 20 + 1 + !first;
		if (!fb[i].dir || !fb[i].reason || w->n + need + reserve > w->cap) { left++; continue; }
		if (!first) w->b[w->n++] = ',';
		dlb_jw_raw(w, "{\"reason\":\"");
		dlb_jw_raw(w, fb[i].reason);
		dlb_jw_raw(w, "\",\"dir\":");
		dlb_jw_str(w, fb[i].dir, fb[i].dirlen);
		dlb_jw_raw(w, ",\"lookups\":");
		dlb_jw_u64(w, fb[i].lookups);
		dlb_jw_raw(w, "}");
		first = 0;
	}
	return left;
}

/* dlb_report_line writes one report line into out[0:cap] (cap >=
 * DLB_REPORT_LINE_MIN) and returns its length. outside[i] and paths[i] are
 * NULL for a path that was claimed but never written (a thread still copying
 * it): it is counted as dropped, like every path that does not fit. */
static inline size_t dlb_report_line(char *out, size_t cap, int64_t pid, const char *exe, size_t exelen,
				     const uint64_t counts[3], const struct dlb_fallback *fb, uint32_t nfb,
				     const char *const *outside, const size_t *olens,
				     uint32_t noutside, const char *const *paths, const size_t *lens,
				     uint32_t npaths, uint64_t dropped)
{
	struct dlb_jw w = {out, cap, 0};
	if (cap < DLB_REPORT_LINE_MIN) return 0;
	if (exelen > DLB_REPORT_EXE_MAX) exelen = DLB_REPORT_EXE_MAX;
	dlb_jw_raw(&w, "{\"pid\":");
	if (pid < 0) { dlb_jw_raw(&w, "-"); dlb_jw_u64(&w, (uint64_t)0 - (uint64_t)pid); }
	else dlb_jw_u64(&w, (uint64_t)pid);
	dlb_jw_raw(&w, ",\"exe\":");
	dlb_jw_str(&w, exe, exelen);
	dlb_jw_raw(&w, ",\"answered\":");
	dlb_jw_u64(&w, counts[0]);
	dlb_jw_raw(&w, ",\"missing\":");
	dlb_jw_u64(&w, counts[1]);
	dlb_jw_raw(&w, ",\"passed\":");
	dlb_jw_u64(&w, counts[2]);
	dlb_jw_raw(&w, ",\"fallbacks\":[");
	dropped += dlb_jw_fallbacks(&w, fb, nfb, DLB_REPORT_AFTER_FB);
	dlb_jw_raw(&w, "],\"outside\":[");
	dropped += dlb_jw_list(&w, outside, olens, noutside, DLB_REPORT_MID);
	dlb_jw_raw(&w, "],\"passed_paths\":[");
	dropped += dlb_jw_list(&w, paths, lens, npaths, DLB_REPORT_TAIL);
	dlb_jw_raw(&w, "],\"dropped\":");
	dlb_jw_u64(&w, dropped);
	dlb_jw_raw(&w, "}\n");
	return w.n;
}

#endif
