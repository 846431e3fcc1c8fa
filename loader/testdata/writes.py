"""writes.py — read-your-writes probe: writes into the bundled tree W
(argv[1]) through the calls apps use and prints what the process and its
children then observe. Natively and under the shim the output must be
byte-identical. The probe puts the tree's names and contents back at the
end, so that it can run twice on one tree (under the shim first)."""
import os
import subprocess
import sys

W = sys.argv[1]
D = W + "/d"
NAMES = ["data.txt", "old.txt", "new.txt", "newdir", "newdir/moved.txt", "newdir/at.txt", "lnk", "lnk2",
         "rel.txt", "sub", "sub/x", "mk-at", "sub/trunc"]


def show(tag):
    print(tag, "listdir", sorted(os.listdir(D)))
    print(tag, "scandir", sorted((e.name, e.is_dir(), e.is_symlink()) for e in os.scandir(D)))
    for n in NAMES:
        p = D + "/" + n
        ex, isd, isl = os.path.exists(p), os.path.isdir(p), os.path.islink(p)
        content = None
        if ex and not isd:
            with open(p) as f:
                content = f.read()
        print(tag, n, ex, isd, isl, repr(content), os.path.getsize(p) if ex else -1,
              os.path.realpath(p) if ex else "-", os.access(p, os.W_OK))


orig = {n: os.stat(D + "/" + n) for n in ["data.txt", "sub/x", "sub/trunc"]}
show("before")
with open(D + "/new.txt", "w") as f:  # open(O_CREAT|O_WRONLY|O_TRUNC)
    f.write("new\n")
show("created")
with open(D + "/lnk", "w") as f:  # through a bundled symlink: data.txt is rewritten
    f.write("changed through the link\n")
show("rewritten")
os.remove(D + "/old.txt")  # unlink
show("removed")
os.mkdir(D + "/newdir")
print("newdir listing", os.listdir(D + "/newdir"))
os.rename(D + "/new.txt", D + "/newdir/moved.txt")
show("renamed")
os.symlink("data.txt", D + "/lnk2")
print("readlink", os.readlink(D + "/lnk2"), os.path.realpath(D + "/lnk2"))
fd = os.open(D, os.O_RDONLY | os.O_DIRECTORY)  # dirfd-relative calls
os.mkdir("mk-at", dir_fd=fd)
with open(os.open("newdir/at.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd), "w") as f:
    f.write("at\n")
os.close(fd)
os.chdir(D + "/sub")
with open("../rel.txt", "w") as f:  # relative to the cwd, with ".."
    f.write("rel\n")
os.truncate("trunc", 3)
os.chdir("/")
show("relative")
os.utime(D + "/sub/x", ns=(1_000_000_000, 2_000_000_000))
st = os.stat(D + "/sub/x")
print("utime", st.st_atime_ns, st.st_mtime_ns)
os.chmod(D + "/sub/x", 0o600)
print("chmod", oct(os.stat(D + "/sub/x").st_mode))

# Children: environ inherited as is (env=None), a copy of os.environ taken
# before the writes, and glibc's own exec (os.system).
code = ("import os, sys; D = sys.argv[1]; print([os.path.exists(D + '/' + n) for n in "
        "('newdir/moved.txt', 'old.txt', 'rel.txt', 'mk-at')], open(D + '/data.txt').read().strip(), "
        "sorted(os.listdir(D)))")
for what, env in [("env=None", None), ("env=copy", dict(os.environ))]:
    out = subprocess.run([sys.executable, "-I", "-c", code, D], capture_output=True, text=True, env=env)
    print("child", what, out.returncode, out.stdout.strip(), out.stderr.strip())
print("child system", os.system("test -e %s/newdir/moved.txt && ! test -e %s/old.txt" % (D, D)))
# A directory that was not written into: still answered (the test checks the report).
print("other", os.path.exists(W + "/other/y.txt"), os.path.exists(W + "/other/nope"), os.listdir(W + "/other"))

# Put names and contents back.
for n in ["newdir/moved.txt", "newdir/at.txt", "lnk2", "rel.txt"]:
    os.unlink(D + "/" + n)
os.rmdir(D + "/newdir")
os.rmdir(D + "/mk-at")
with open(D + "/old.txt", "w") as f:
    f.write("old\n")
with open(D + "/data.txt", "w") as f:
    f.write("original\n")
with open(D + "/sub/trunc", "w") as f:
    f.write("truncate me\n")
os.chmod(D + "/sub/x", 0o644)
for n, s in orig.items():
    os.utime(D + "/" + n, ns=(s.st_atime_ns, s.st_mtime_ns))
show("restored")
