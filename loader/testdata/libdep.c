/* libdep.c — tree/lib/libdep.so. */
int probe_dep_value(void) { return 23; }
