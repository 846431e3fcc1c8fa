/* libbad.c — tree/lib/libbad.so: needs a symbol nobody defines, so dlopen
 * fails and dlerror names the file (it must name the original path). */
int probe_undefined_symbol(void);
int bad_value(void) { return probe_undefined_symbol(); }
