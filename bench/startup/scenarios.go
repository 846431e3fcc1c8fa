package startup

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dlbundle/dlbundle/examples/loadtest"
)

// A scenario is an application tree that the harness places in the slowfs
// source directory (the "shared file system") and starts as N ranks.
type scenario struct {
	name string
	// prepare builds the app tree in dir (inside the slowfs source tree).
	prepare func(ctx context.Context, dir string) error
	// prepareAt, when set, replaces prepare and the copy for the ideal runs:
	// it builds the tree in dir for running at root (trees with absolute
	// paths inside, as Spack's, cannot be copied elsewhere).
	prepareAt func(ctx context.Context, dir, root string) error
	// command is how a rank starts the app when the tree is visible at root
	// (the slowfs mount, or the tmpfs copy for the ideal runs).
	command func(root string) launch
}

// baseEnv is the whole environment of a rank: nothing inherited, so that
// .pth files, PYTHON* variables and locale settings of the machine running
// the benchmark cannot change what the ranks look up.
func baseEnv(extra ...string) []string {
	return append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LC_ALL=C"}, extra...)
}

func loadtestScenario(c loadtest.Config) scenario {
	return scenario{
		name: "loadtest",
		prepare: func(ctx context.Context, dir string) error {
			c.OutputDir = dir
			_, err := loadtest.Build(ctx, c)
			return err
		},
		command: func(root string) launch {
			return launch{argv: []string{filepath.Join(root, "app")}, env: baseEnv(), dir: "/", expect: "loadtest ok"}
		},
	}
}

// SpackPackages is the spack scenario's number of prefixes: a small real
// Spack stack (100-300 are usual).
const SpackPackages = 100

// spackScenario is examples/spack's tree: n packages, each in its own prefix,
// found through absolute RUNPATHs to every dependency's lib directory (one
// process searches n directories, as on a Spack stack), a plugin dlopen()ed
// by soname and a dlopen that fails.
func spackScenario(n int) scenario {
	return scenario{
		name: "spack",
		prepareAt: func(ctx context.Context, dir, root string) error {
			gen, err := repoFile("examples/spack/make-tree.sh")
			if err != nil {
				return err
			}
			out, err := exec.CommandContext(ctx, "sh", gen, dir, strconv.Itoa(n), root).CombinedOutput()
			if err != nil {
				return fmt.Errorf("bench: spack tree: %v\n%s", err, out)
			}
			return nil
		},
		command: func(root string) launch {
			h := sha256.Sum256([]byte("app"))
			app := filepath.Join(root, "linux-x86_64", "app-1.0-"+hex.EncodeToString(h[:])[:7], "bin/spack-app")
			return launch{argv: []string{app}, env: baseEnv(), dir: "/",
				expect: "dlerror libnope-spack.so: cannot open shared object file"}
		},
	}
}

// repoFile finds a file of this repository from the working directory (the
// repository root under make, the package directory under go test).
func repoFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, rel), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("bench: %s: not inside the dlbundle repository", rel)
		}
		dir = parent
	}
}

// Python scenarios run Debian's interpreter from a prefix inside the tree:
//
//	bin/python3                      copy of /usr/bin/python3.11
//	lib/python3.11/                  copy of the standard library (with its __pycache__)
//	lib/python3/dist-packages/numpy  copy of Debian's python3-numpy (numpy scenario)
//	lib/x86_64-linux-gnu/            the shared libraries the run maps, found via LD_LIBRARY_PATH
//
// CPython finds its prefix by looking for lib/python3.11/os.py above the
// executable, so no PYTHONHOME is needed; Debian's site.py then adds
// <prefix>/lib/python3/dist-packages. Every import therefore searches the tree.

const (
	systemPython = "/usr/bin/python3.11"
	pythonStdlib = "/usr/lib/python3.11"
	debianNumpy  = "/usr/lib/python3/dist-packages/numpy"
	pythonLibDir = "lib/x86_64-linux-gnu"
)

// StdlibImports is the python scenario's import set: a typical tool's worth of
// the standard library, including extension modules that load shared libraries.
const StdlibImports = "json, decimal, email.parser, http.client, xml.etree.ElementTree, argparse, logging, subprocess, unittest, asyncio, sqlite3, csv, datetime, pathlib, tempfile, typing, dataclasses"

func pythonScenario(name, imports string, withNumpy bool) scenario {
	script := "import " + imports + "; print('" + name + " ok')"
	cmd := func(root string) launch {
		return launch{
			argv: []string{filepath.Join(root, "bin/python3"), "-c", script},
			// One BLAS thread per rank, as MPI jobs run: otherwise every
			// numpy rank starts a spinning thread per core.
			env: baseEnv("PYTHONNOUSERSITE=1", "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1",
				"LD_LIBRARY_PATH="+filepath.Join(root, pythonLibDir)),
			dir:    "/",
			expect: name + " ok",
		}
	}
	return scenario{
		name:    name,
		command: cmd,
		prepare: func(ctx context.Context, dir string) error {
			if _, err := os.Stat(systemPython); err != nil {
				return fmt.Errorf("bench: %s scenario needs Debian's %s (apt-get install python3): %w", name, systemPython, err)
			}
			if withNumpy {
				if _, err := os.Stat(debianNumpy); err != nil {
					return fmt.Errorf("bench: numpy scenario needs Debian's python3-numpy (%s): %w", debianNumpy, err)
				}
			}
			for _, d := range []string{"bin", "lib/python3/dist-packages", pythonLibDir} {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
					return err
				}
			}
			if err := copyTree(ctx, systemPython, filepath.Join(dir, "bin/python3")); err != nil {
				return err
			}
			if err := copyTree(ctx, pythonStdlib, filepath.Join(dir, "lib/python3.11")); err != nil {
				return err
			}
			if withNumpy {
				if err := copyTree(ctx, debianNumpy, filepath.Join(dir, "lib/python3/dist-packages/numpy")); err != nil {
					return err
				}
			}
			// A run from the new prefix tells which shared libraries the
			// imports map; copy them next to the prefix, then check that a
			// second run maps nothing from outside the tree but the loader.
			l := cmd(dir)
			outside, err := mappedOutside(ctx, l, dir)
			if err != nil {
				return err
			}
			for _, so := range outside {
				if err := copyLibrary(ctx, so, filepath.Join(dir, pythonLibDir)); err != nil {
					return err
				}
			}
			if outside, err = mappedOutside(ctx, l, dir); err != nil {
				return err
			}
			if len(outside) > 0 {
				return fmt.Errorf("bench: %s scenario still maps %v from outside its tree %s", name, outside, dir)
			}
			return nil
		},
	}
}

// mappedOutside runs l with a suffix that prints the process's memory map and
// returns the shared objects mapped from outside tree (except the dynamic
// loader, which the kernel maps from the ELF interpreter path).
func mappedOutside(ctx context.Context, l launch, tree string) ([]string, error) {
	argv := append([]string{}, l.argv...)
	argv[len(argv)-1] += "; import sys; sys.stdout.write(open('/proc/self/maps').read())"
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = l.env, l.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("bench: running %s from its new prefix: %v\n%s", argv[0], err, stderr.String())
	}
	if !bytes.Contains(out, []byte(l.expect)) {
		return nil, fmt.Errorf("bench: %s from its new prefix printed no %q", argv[0], l.expect)
	}
	seen := map[string]bool{}
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") || !strings.Contains(filepath.Base(f[5]), ".so") {
			continue
		}
		p := f[5]
		if strings.HasPrefix(p, tree+"/") || strings.Contains(filepath.Base(p), "ld-linux") || seen[p] {
			continue
		}
		seen[p] = true
		paths = append(paths, p)
	}
	return paths, nil
}

// copyLibrary copies a shared library into dir under its soname, the name the
// dynamic loader searches for.
func copyLibrary(ctx context.Context, path, dir string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("bench: %s: %w", path, err)
	}
	names, _ := f.DynString(elf.DT_SONAME)
	f.Close()
	name := filepath.Base(path)
	if len(names) > 0 {
		name = names[0]
	}
	return copyTree(ctx, path, filepath.Join(dir, name))
}

// copyTree copies with cp -a, keeping modes and mtimes (Python checks .pyc
// files against their source's mtime); a symlink given as src is followed.
func copyTree(ctx context.Context, src, dst string) error {
	if real, err := filepath.EvalSymlinks(src); err == nil {
		src = real
	}
	out, err := exec.CommandContext(ctx, "cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: cp -a %s %s: %v: %s", src, dst, err, out)
	}
	return nil
}
