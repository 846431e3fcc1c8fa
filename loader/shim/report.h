/* report.h — per-process counts for DLBUNDLE_REPORT (docs/loader.md).
 *
 * Counting is lock-free and allocation-free (atomic adds; passed-through
 * paths go to a fixed table claimed with compare-and-swap). At exit the
 * process appends one JSON line to the report file with a single O_APPEND
 * write, so lines from concurrent processes never interleave.
 */
#ifndef DLB_REPORT_H
#define DLB_REPORT_H

#include <stddef.h>
#include <stdint.h>

enum { REPORT_ANSWERED, REPORT_MISSING, REPORT_PASSED };

/* Why a lookup passed through other than the image lacking the path
 * (docs/loader.md, "Reports": the names in report.c's fb_names). */
enum {
	FB_WRITTEN,       /* at or below a name the process changed (dir: that name) */
	FB_WRITTEN_ALL,   /* everything marked written */
	FB_NO_TABLE,      /* the table could not be opened or mapped: inactive */
	FB_BAD_TABLE,     /* damaged or another version: inactive */
	FB_STAGE_TOO_LONG,/* DLBUNDLE_STAGE too long: inactive */
	FB_DIRFD,         /* relative to a directory fd */
	FB_GROUPS,        /* a permission the shim cannot decide (> 1,024 groups) */
	FB_TOO_LONG,      /* longer than the shim's buffers */
	FB_OTHER_UID,     /* the process's ids changed and cannot read the stage */
	FB_DIR_OPEN,      /* a bundled directory opened (or listed) on the original tree */
	FB_NREASONS
};

struct shim_env;
void report_init(const struct shim_env *v);
void report_count(int kind, const char *passed_path);
void report_fallback(int reason, const char *dir, size_t n); /* also counts the lookup as passed */
int report_wanted(void);                                     /* a report is being kept */
/* A bundled directory (dir[0:n], canonical) opened as a descriptor, or
 * listed, from the original tree: a pass-through of reason FB_DIR_OPEN
 * (was_answered: the lookup had been counted as answered). */
void report_dir_open(const char *dir, size_t n, int was_answered);
void report_write(void); /* at exit; also called by our _exit and fatal signals */
int shim_from_outside(const char *l_name); /* a library ld.so opened from outside the image */
void report_closing(const char *l_name);   /* dlclose: list it even if it is unmapped by exit */
struct dlb_audit_share;
const struct dlb_audit_share *shim_notes(void); /* audit.so's notes (table.h, DLB_NOTE_*), or NULL */

#endif
