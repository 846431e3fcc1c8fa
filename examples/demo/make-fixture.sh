#!/bin/sh
# make-fixture.sh OUTDIR [NLIBS] — build the demo app: a C program that loads
# NLIBS (default 40) shared libraries the way HPC codes do, through RUNPATH
# with $ORIGIN (libraries that need further libraries, again by $ORIGIN), plus
# two plugins opened with dlopen() by name, and a data file read at start-up.
#
#   OUTDIR/bin/demo-app           RUNPATH $ORIGIN/../lib:$ORIGIN/../plugins
#   OUTDIR/lib/libdemoNN.so       libdemoNN needs libdemo(NN+1) (RUNPATH $ORIGIN)
#   OUTDIR/plugins/libplug_*.so   dlopen()ed by name at run time
#   OUTDIR/share/demo/greeting.txt
#
# It prints one line with a checksum that depends on every library, so a wrong
# or missing library shows. Debian's gcc links --as-needed by default, which
# would drop the DT_NEEDED entries the demo is about: hence --no-as-needed.
set -eu
out=${1:?usage: make-fixture.sh OUTDIR [NLIBS]}
n=${2:-40}
CC=${CC:-gcc}
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
mkdir -p "$out/bin" "$out/lib" "$out/plugins" "$out/share/demo"

i=$((n - 1))
while [ "$i" -ge 0 ]; do
	nn=$(printf %02d "$i")
	next=$(printf %02d $((i + 1)))
	if [ "$i" -eq $((n - 1)) ]; then
		printf 'int demo%s(int x) { return x * 31 + %d; }\n' "$nn" "$i" >"$src/demo$nn.c"
		deps=""
	else
		printf 'int demo%s(int x);\nint demo%s(int x) { return demo%s(x) * 31 + %d; }\n' \
			"$next" "$nn" "$next" "$i" >"$src/demo$nn.c"
		deps="-L$out/lib -ldemo$next"
	fi
	# shellcheck disable=SC2086,SC2016
	$CC -shared -fPIC -O1 -o "$out/lib/libdemo$nn.so" "$src/demo$nn.c" \
		-Wl,--no-as-needed $deps -Wl,-rpath,'$ORIGIN' -Wl,--enable-new-dtags
	i=$((i - 1))
done

for p in alpha beta; do
	printf 'int plugin_%s(int x) { return x ^ 0x%x; }\n' "$p" "$(printf %s "$p" | cksum | cut -d' ' -f1)" >"$src/plug_$p.c"
	$CC -shared -fPIC -O1 -o "$out/plugins/libplug_$p.so" "$src/plug_$p.c"
done

echo "hello from the bundled demo" >"$out/share/demo/greeting.txt"

{
	echo '#include <dlfcn.h>'
	echo '#include <stdio.h>'
	echo '#include <stdlib.h>'
	echo '#include <string.h>'
	echo '#include <unistd.h>'
	i=0
	while [ "$i" -lt "$n" ]; do printf 'int demo%02d(int);\n' "$i"; i=$((i + 1)); done
	cat <<'C'
static int plugin(const char *lib, const char *sym, int x) {
	void *h = dlopen(lib, RTLD_NOW);
	if (!h) { fprintf(stderr, "demo-app: %s\n", dlerror()); exit(2); }
	int (*f)(int) = (int (*)(int))dlsym(h, sym);
	if (!f) { fprintf(stderr, "demo-app: %s\n", dlerror()); exit(2); }
	return f(x);
}
int main(void) {
	unsigned sum = 0;
C
	i=0
	while [ "$i" -lt "$n" ]; do printf '\tsum = sum * 7 + (unsigned)demo%02d(%d);\n' "$i" "$i"; i=$((i + 1)); done
	cat <<'C'
	sum ^= (unsigned)plugin("libplug_alpha.so", "plugin_alpha", (int)sum);
	sum ^= (unsigned)plugin("libplug_beta.so", "plugin_beta", (int)sum);
	char self[4096], path[4200], line[128] = "";
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n < 0) { perror("demo-app: /proc/self/exe"); return 2; }
	self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(path, sizeof path, "%s/../share/demo/greeting.txt", self);
	FILE *f = fopen(path, "r");
	if (!f || !fgets(line, sizeof line, f)) { perror(path); return 2; }
	fclose(f);
	line[strcspn(line, "\n")] = 0;
	printf("%s; checksum %08x\n", line, sum);
	return 0;
}
C
} >"$src/main.c"
# shellcheck disable=SC2016
$CC -O1 -o "$out/bin/demo-app" "$src/main.c" -Wl,--no-as-needed -L"$out/lib" -ldemo00 \
	$(i=1; while [ "$i" -lt "$n" ]; do printf -- '-ldemo%02d ' "$i"; i=$((i + 1)); done) \
	-ldl -Wl,-rpath,'$ORIGIN/../lib:$ORIGIN/../plugins' -Wl,--enable-new-dtags
