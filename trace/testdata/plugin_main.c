// plugin_main: dlopen("libplug.so") found through the executable's RUNPATH
// ($ORIGIN/lib); libplug.so needs libdep.so through its own RUNPATH $ORIGIN.
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
	void *h = dlopen("libplug.so", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	int (*plug)(void) = (int (*)(void))dlsym(h, "plug");
	return plug && plug() == 42 ? 0 : 2;
}
