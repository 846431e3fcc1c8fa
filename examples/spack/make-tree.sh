#!/bin/sh
# make-tree.sh OUTDIR [NPKGS [ROOT]] — a Spack-style software stack: every package in
# its own prefix, found through ABSOLUTE search paths to its dependencies' lib
# directories (what Spack's compiler wrappers write), so that one process
# searches NPKGS (default 100) directories.
#
#   OUTDIR/linux-x86_64/app-1.0-<h>/bin/spack-app
#       needs libpkgNNN.so of every package; DT_RUNPATH = every package's lib
#       dir, in package order (as Spack lists a package's link dependencies)
#   OUTDIR/linux-x86_64/pkgNNN-1.0-<h>/lib/libpkgNNN.so
#       needs libpkg(NNN+1).so; DT_RUNPATH = its own and that package's lib dir
#   OUTDIR/linux-x86_64/plugin-1.0-<h>/lib/libspackplug.so
#       dlopen()ed by soname through the app's RUNPATH; needs libplugdep.so,
#       found through its DT_RPATH (old dtags: ld.so walks the loader chain)
#   OUTDIR/linux-x86_64/plugdep-1.0-<h>/lib/libplugdep.so
#   OUTDIR/linux-x86_64/py-spackext-1.0-<h>/lib/python3/site-packages/
#       spackext.cpython-*.so: a Python extension module with its own RUNPATH
#       to pkg000's lib dir
#   OUTDIR/linux-x86_64/py-spackext-1.0-<h>/bin/spack-py  (a Python script)
#
# ROOT (default OUTDIR) is where the tree will be seen when it runs (e.g. a
# mount of OUTDIR): the absolute search paths and commands name it, the files
# are written to OUTDIR. spack-app prints a checksum over every library, the plugin's answer, the
# dladdr() file name of a library function, and dlerror() of a failed
# dlopen("libnope-spack.so"); spack-py prints the extension's answer.
# --no-as-needed: Debian's gcc links --as-needed by default.
set -eu
out=${1:?usage: make-tree.sh OUTDIR [NPKGS]}
n=${2:-100}
CC=${CC:-gcc}
PY=${PYTHON:-/usr/bin/python3}
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
mkdir -p "$out/linux-x86_64"
out=$(cd "$out" && pwd)
root=${3:-$out}
base="$out/linux-x86_64"

# prefix NAME: the package's install prefix, with a Spack-like hash suffix;
# at ROOT: the same as the running tree sees it.
prefix() { printf '%s/%s-1.0-%s' "$base" "$1" "$(printf %s "$1" | sha256sum | cut -c1-7)"; }
at() { printf '%s%s' "$root" "${1#"$out"}"; }

i=$((n - 1))
runpath=""
needs=""
while [ "$i" -ge 0 ]; do
	k=$(printf %03d "$i")
	p=$(prefix "pkg$k")
	mkdir -p "$p/lib"
	if [ "$i" -eq $((n - 1)) ]; then
		printf 'int pkg%s(int x) { return x * 31 + %d; }\n' "$k" "$i" >"$src/pkg$k.c"
		deps="" rp="$(at "$p")/lib"
	else
		nk=$(printf %03d $((i + 1)))
		np=$(prefix "pkg$nk")
		printf 'int pkg%s(int x);\nint pkg%s(int x) { return pkg%s(x) * 31 + %d; }\n' "$nk" "$k" "$nk" "$i" >"$src/pkg$k.c"
		deps="-L$np/lib -lpkg$nk" rp="$(at "$p")/lib:$(at "$np")/lib"
	fi
	# shellcheck disable=SC2086
	$CC -shared -fPIC -O0 -o "$p/lib/libpkg$k.so" "$src/pkg$k.c" -Wl,-soname,libpkg$k.so \
		-Wl,--no-as-needed $deps -Wl,-rpath,"$rp" -Wl,--enable-new-dtags
	runpath="$(at "$p")/lib${runpath:+:$runpath}"
	needs="-L$p/lib -lpkg$k $needs"
	i=$((i - 1))
done

dep=$(prefix plugdep)
mkdir -p "$dep/lib"
printf 'int plugdep(int x) { return x + 7; }\n' >"$src/plugdep.c"
$CC -shared -fPIC -O0 -o "$dep/lib/libplugdep.so" "$src/plugdep.c" -Wl,-soname,libplugdep.so

plug=$(prefix plugin)
mkdir -p "$plug/lib"
printf 'int plugdep(int x);\nint spack_plugin(int x) { return plugdep(x) * 3; }\n' >"$src/plug.c"
$CC -shared -fPIC -O0 -o "$plug/lib/libspackplug.so" "$src/plug.c" -Wl,-soname,libspackplug.so \
	-Wl,--no-as-needed -L"$dep/lib" -lplugdep -Wl,-rpath,"$(at "$dep")/lib" -Wl,--disable-new-dtags

app=$(prefix app)
mkdir -p "$app/bin"
cat >"$src/app.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
int pkg000(int x);
int main(void)
{
	int sum = pkg000(1);
	void *h = dlopen("libspackplug.so", RTLD_NOW);
	if (!h) { printf("plugin: %s\n", dlerror()); return 1; }
	int (*f)(int) = (int (*)(int))dlsym(h, "spack_plugin");
	Dl_info di;
	if (!f || !dladdr((void *)f, &di)) return 1;
	printf("checksum %d plugin %d\n", sum, f(5));
	printf("dladdr %s\n", di.dli_fname);
	if (dlopen("libnope-spack.so", RTLD_NOW)) return 1;
	printf("dlerror %s\n", dlerror());
	return 0;
}
EOF
# shellcheck disable=SC2086
$CC -O0 -o "$app/bin/spack-app" "$src/app.c" -Wl,--no-as-needed $needs \
	-Wl,-rpath,"$runpath:$(at "$plug")/lib" -Wl,--enable-new-dtags -ldl

ext=$(prefix py-spackext)
site="$ext/lib/python3/site-packages"
mkdir -p "$site" "$ext/bin"
suffix=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
inc=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
cat >"$src/spackext.c" <<'EOF'
#define PY_SSIZE_T_CLEAN
#include <Python.h>
int pkg000(int x);
static PyObject *answer(PyObject *self, PyObject *args) { (void)self; (void)args; return PyLong_FromLong(pkg000(2)); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, 0}, {0, 0, 0, 0}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "spackext", 0, -1, methods, 0, 0, 0, 0};
PyMODINIT_FUNC PyInit_spackext(void) { return PyModule_Create(&mod); }
EOF
p0=$(prefix pkg000)
$CC -shared -fPIC -O0 -I"$inc" -o "$site/spackext$suffix" "$src/spackext.c" \
	-Wl,--no-as-needed -L"$p0/lib" -lpkg000 -Wl,-rpath,"$(at "$p0")/lib" -Wl,--enable-new-dtags
{
	echo "#!$PY"
	echo 'import sys'
	echo "sys.path.insert(0, '$(at "$site")')"
	echo 'import spackext'
	echo 'print("spackext", spackext.answer())'
} >"$ext/bin/spack-py"
chmod +x "$ext/bin/spack-py"
at "$app/bin/spack-app"; echo
at "$ext/bin/spack-py"; echo
