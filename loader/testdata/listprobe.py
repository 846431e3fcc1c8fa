# listprobe.py: every way Python reads a directory, for each directory in
# argv, printed so that a run under dlbundle exec can be compared line by
# line with a native run (loader/listing_exec_test.go). Order matters: nothing
# is sorted.
import glob
import os
import sys

for d in sys.argv[1:]:
    print("==", d)
    try:
        print("listdir", os.listdir(d))
    except OSError as e:
        print("listdir", type(e).__name__, e.errno)
        continue
    with os.scandir(d) as it:
        for e in it:
            print("scandir", e.name, e.is_dir(), e.is_file(), e.is_symlink(), e.inode(),
                  e.stat(follow_symlinks=False).st_ino)
    print("glob *", glob.glob(os.path.join(d, "*")))
    print("glob *.py", glob.glob(os.path.join(d, "*.py")))
    print("glob ** *.pyi", glob.glob(os.path.join(d, "**", "*.pyi"), recursive=True))
    for top, dirs, files in os.walk(d):
        print("walk", top, dirs, files)
