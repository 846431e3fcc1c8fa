/* plugin.c — tree/lib/plugins/libplug.so, dlopen'ed by name (RUNPATH of the probe). */
int probe_dep_value(void);
int plug_value(void) { return 7 + probe_dep_value(); }
