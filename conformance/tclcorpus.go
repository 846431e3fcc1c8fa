package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// tclSourceDir is where the Tcl sources are unpacked. Debian ships no Tcl
// test suite in a binary package: its source package (tcl8.6, the same
// 8.6.13 as the installed tclsh8.6) holds tests/.
func tclSourceDir(c *Ctx) string { return filepath.Join(c.Src, "tcl8.6.13") }

func tclCorpus() *Corpus {
	return &Corpus{
		Name: "tcl",
		What: "Tcl 8.6.13's own test suite (tests/*.test from Debian's tcl8.6 source package, the version of the " +
			"installed tclsh8.6), run with the installed interpreter: `tclsh8.6 tests/all.tcl -verbose pse -tmpdir DIR`; " +
			"outcome per test. Tests that need the C test commands of a `tcltest` build binary skip themselves " +
			"(constraints). Pilot: the same on info.test alone. Debian ships no test suite of tcllib or of Perl " +
			"(perl's t/ needs a built source tree), so neither is run.",
		Setup: func(c *Ctx) error {
			if _, err := os.Stat(filepath.Join(tclSourceDir(c), "tests", "all.tcl")); err == nil {
				return nil
			}
			return fetchTclSource(c)
		},
		Pilot: func(c *Ctx) Run {
			return Run{Argv: []string{"/usr/bin/tclsh8.6", filepath.Join(tclSourceDir(c), "tests", "all.tcl"), "-file", "info.test",
				"-verbose", "pse", "-tmpdir", mkdir(c, "tcl-pilot")}, Env: c.Env, Dir: mkdir(c, "tcl-pilot-cwd")}
		},
		BuildArgs: func(c *Ctx) []string { return []string{"--include", tclSourceDir(c)} },
		Runs: func(c *Ctx) []NamedRun {
			argv := []string{"/usr/bin/tclsh8.6", filepath.Join(tclSourceDir(c), "tests", "all.tcl"), "-verbose", "pse", "-tmpdir", mkdir(c, "tcl-tmp")}
			if c.Subset {
				argv = append(argv, "-file", "cmdAH.test fCmd.test fileName.test fileSystem.test")
			}
			return []NamedRun{{Name: "tcltest", Run: Run{Argv: argv, Env: c.Env, Dir: mkdir(c, "tcl-run")}}}
		},
		Parse: func(c *Ctx, nr NamedRun, out []byte) (Outcomes, error) { return ParseTcltest(bytes.NewReader(out)) },
	}
}

// fetchTclSource downloads Debian's tcl8.6 source package with apt-get,
// through a private sources list and cache (deb-src lines in the system's
// own configuration are neither needed nor added), and unpacks its
// upstream tarball into c.Src.
func fetchTclSource(c *Ctx) error {
	apt := filepath.Join(c.Src, "apt")
	for _, d := range []string{"lists/partial", "archives/partial", "dl"} {
		if err := os.MkdirAll(filepath.Join(apt, d), 0o755); err != nil {
			return err
		}
	}
	list := filepath.Join(apt, "sources.list")
	if err := os.WriteFile(list, []byte("deb-src http://deb.debian.org/debian bookworm main\n"), 0o644); err != nil {
		return err
	}
	opts := []string{"-q", "-o", "Dir::Etc::SourceList=" + list, "-o", "Dir::Etc::SourceParts=/dev/null",
		"-o", "Dir::State::Lists=" + filepath.Join(apt, "lists"), "-o", "Dir::Cache=" + apt}
	fmt.Fprintln(os.Stderr, "conformance tcl: downloading Debian's tcl8.6 source package (the test suite) into", c.Src)
	for _, args := range [][]string{append(opts, "update"), append(opts, "source", "--download-only", "tcl8.6")} {
		cmd := exec.Command("apt-get", args...)
		cmd.Dir = filepath.Join(apt, "dl")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %v: %v\n%s", args[len(args)-1], err, tail(out))
		}
	}
	tars, _ := filepath.Glob(filepath.Join(apt, "dl", "tcl8.6_*.orig.tar.gz"))
	if len(tars) == 0 {
		return fmt.Errorf("no tcl8.6 upstream tarball in %s", filepath.Join(apt, "dl"))
	}
	if out, err := exec.Command("tar", "-C", c.Src, "-xzf", tars[0]).CombinedOutput(); err != nil {
		return fmt.Errorf("tar: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(tclSourceDir(c), "tests", "all.tcl")); err != nil {
		return fmt.Errorf("unpacked %s but found no tests/all.tcl: %v", tars[0], err)
	}
	return nil
}
