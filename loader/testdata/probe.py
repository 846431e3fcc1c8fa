"""probe.py — prints what Python observes of the tree T (argv[1]) for the
differential conformance test: output natively and under the shim must be
byte-identical."""
import ctypes
import importlib
import importlib.resources
import os
import subprocess
import sys
import threading

T = sys.argv[1]
sys.path[:0] = [T + "/py", T + "/py2"]


def show_stat(what, rel, fn):
    try:
        st = fn(T + rel)
    except OSError as e:
        print(what, rel, type(e).__name__, e.errno)
        return
    print(what, rel, oct(st.st_mode), st.st_size, st.st_mtime_ns, st.st_uid, st.st_gid,
          st.st_nlink, st.st_ino, st.st_dev, st.st_ctime_ns, st.st_atime_ns, st.st_blocks, st.st_blksize)


RELS = ["", "/py", "/py/pkg", "/py/pkg/__init__.py", "/py/pkg/data.txt", "/py/pkg/nope.py",
        "/lib/libprobe.so", "/lib/link-to-probe.so", "/lib/dangling", "/lib/loop1",
        "/py/pkg/__init__.py/x", "/py/ns", "/py2/ns/b.py", "/data/hard.txt", "/data/big", "/data"]
for rel in RELS:
    show_stat("stat", rel, os.stat)
    show_stat("lstat", rel, os.lstat)
    print("exists", rel, os.path.exists(T + rel), os.path.isdir(T + rel), os.path.islink(T + rel))
    print("access", rel, os.access(T + rel, os.R_OK), os.access(T + rel, os.X_OK))
    try:
        print("readlink", rel, os.readlink(T + rel))
    except OSError as e:
        print("readlink", rel, type(e).__name__, e.errno)
    print("realpath", rel, os.path.realpath(T + rel))
    try:
        with open(T + rel, "rb") as f:
            print("open", rel, len(f.read()))
            show_stat("fstat", rel, lambda p: os.fstat(f.fileno()))
    except OSError as e:
        print("open", rel, type(e).__name__, e.errno)

for rel in ["", "/py", "/py/pkg", "/lib", "/nolib", "/data", "/data/big"]:
    try:
        print("listdir", rel, sorted(os.listdir(T + rel)))
        print("scandir", rel, sorted((e.name, e.is_dir(), e.is_file(), e.is_symlink(), e.inode())
                                     for e in os.scandir(T + rel)))
        # natively DirEntry.inode() is stat's st_ino (no mount points here)
        print("scandir inode==stat", rel, all(e.inode() == e.stat(follow_symlinks=False).st_ino
                                                for e in os.scandir(T + rel)))
    except OSError as e:
        print("listdir", rel, type(e).__name__, e.errno)

# Paths relative to a working directory the image does not bundle, with
# ".." over it (resolved from getcwd's canonical answer, not passed through).
os.chdir(T + "/../outside/sub")
for rel in ["../../tree/py/pkg/mod.py", "../../tree/lib/link-to-probe.so", "./../../tree/py/../data/hello.txt",
            "../../tree/py/nope.py", "../file"]:
    show_stat("rel stat", rel, os.stat)
    print("rel realpath", rel, os.path.realpath(rel), os.path.exists(rel))
os.chdir("/")
# shutil.copy2 copies atime and mtime: the copy's times are the original's.
import shutil, tempfile  # noqa: E401,E402
with tempfile.TemporaryDirectory() as td:
    shutil.copy2(T + "/data/hello.txt", td + "/copy")
    st = os.stat(td + "/copy")
    print("copy2 times", st.st_atime_ns, st.st_mtime_ns)

import pkg  # noqa: E402  (a regular package of the tree)
import pkg.mod  # noqa: E402
import ns.a  # noqa: E402  (namespace package: two portions)
import ns.b  # noqa: E402
print("pkg", pkg.__file__, pkg.mod.VALUE, ns.a.VALUE, ns.b.VALUE, sorted(ns.__path__))
print("resources", importlib.resources.files("pkg").joinpath("data.txt").read_text().strip())
try:
    import pkg.missing  # noqa: F401
except ImportError as e:
    print("import missing", type(e).__name__, e.name)
import json, decimal, email.parser, xml.dom.minidom, zlib  # noqa: E401,E402  (stdlib, some C extensions)
print("stdlib", json.__file__, decimal.__name__, zlib.__file__ if hasattr(zlib, "__file__") else "builtin")

lib = ctypes.CDLL(T + "/lib/libprobe.so")
print("ctypes", lib.probe_lib_where())
print("executable", sys.executable, sys.prefix)

with open("/proc/self/maps") as f:
    names = sorted({line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6})
# The shim's own objects and table are visible like any preloaded library;
# any other name under the stage would be a leak.
own = os.environ.get("DLBUNDLE_STAGE", "\0")
print("maps", [n for n in names if (n.startswith(T) or "stage" in n)
               and not n.startswith((own + "/shim/", own + "/table"))])

fds = sorted(os.listdir("/proc/self/fd"))
print("fds", len(fds))

results = []


def worker():
    n = 0
    for _ in range(300):
        for rel in RELS:
            n += os.path.exists(T + rel)
    results.append(n)


threads = [threading.Thread(target=worker) for _ in range(4)]
for th in threads:
    th.start()
for th in threads:
    th.join()
print("threads", results)

out = subprocess.run([T + "/bin/probe", "helper", T], capture_output=True, text=True, close_fds=True)
print("subprocess", out.returncode, out.stdout)
out = subprocess.run(["dash", "-c", "test -e %s/py/pkg/data.txt && ! test -e %s/py/nope && echo dash-ok" % (T, T)],
                     capture_output=True, text=True, close_fds=True)
print("dash", out.returncode, out.stdout)
out = subprocess.run([sys.executable, "-I", "-B", "-c", "import pkg.mod; print(pkg.mod.__file__)"],
                     capture_output=True, text=True, cwd=T + "/py", close_fds=True)
print("python child", out.returncode, out.stdout, out.stderr)
