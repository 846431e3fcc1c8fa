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

void report_init(void);
void report_count(int kind, const char *passed_path);
void report_write(void); /* at exit; also called by our _exit and fatal signals */
int shim_from_outside(const char *l_name); /* preload.c: a library ld.so opened from outside the image */
size_t shim_unstage(char *path, size_t len); /* preload.c: a staged path back to its original, in place */

#endif
