/* libprobe.c — tree/lib/libprobe.so: needs libdep.so through RUNPATH $ORIGIN. */
int probe_dep_value(void);
int probe_lib_where(void) { return 100 + probe_dep_value(); }
