package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/dlbundle/dlbundle/image"
)

// parseWith parses args with dlbundle's parser, either as main does (one
// verb's grammar, the command line split: parse) or with kong alone over
// the whole CLI and the whole line, and returns the selected verb's struct.
func parseWith(t *testing.T, args []string, split bool) (any, error) {
	t.Helper()
	exit := kong.Exit(func(int) { t.Fatalf("kong exited on %q", args) })
	var (
		p   *kong.Kong
		ctx *kong.Context
		err error
	)
	if split {
		p, err = newParser(args, exit)
	} else {
		p, err = kong.New(&CLI{}, exit)
	}
	if err != nil {
		t.Fatal(err)
	}
	if split {
		ctx, err = parse(p, args)
	} else {
		ctx, err = p.Parse(args)
	}
	if err != nil {
		return nil, err
	}
	return ctx.Selected().Target.Interface(), nil
}

// The split must not change what the command line means: every spelling of
// flags, values and the command gives the struct kong alone gives.
func TestSplitCommandLineMatchesKong(t *testing.T) {
	for _, line := range []string{
		"exec img -- /bin/echo a b",
		"exec img /bin/echo -n --debug x",
		"exec --debug --workers 3 img -- /bin/echo --workers 4",
		"exec --workers=3 --stage-dir /s img -- echo -- x",
		"exec --report r --stage-dir=-- img /bin/true",
		"exec img --debug /bin/true",
		"exec img --bogus x",
		"exec img -- -- x",
		"exec -- img cmd -x",
		"trace -q -o out.trace -- /bin/sh -c 'exit 3'",
		"trace -qo out.trace -- sh",
		"trace -oout.trace sh -c x",
		"trace /bin/sh -o x",
		"trace -q -- -q",
		"__trace-stub -- /bin/true -q",
		"build -o app.dlimg a.trace b.trace",
		"verify --against-source app.dlimg",
	} {
		args := strings.Fields(line)
		want, werr := parseWith(t, args, false)
		got, gerr := parseWith(t, args, true)
		if (werr == nil) != (gerr == nil) {
			t.Errorf("%q: kong: %v, split: %v", line, werr, gerr)
			continue
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\nsplit %+v\nkong  %+v", line, got, want)
		}
	}
}

// Quadratic parsing cannot come back unnoticed: kong is handed the verb's own
// arguments only, whatever the length of the app's command line, and the
// command arrives intact. (Not a timing test: it counts what kong is given.)
func TestLongCommandLineIsNotParsedByKong(t *testing.T) {
	p, err := kong.New(&CLI{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 100_000} {
		args := []string{"exec", "--stage-dir", "/s", "img.dlimg", "--", "/bin/true"}
		for i := range n {
			args = append(args, strconv.Itoa(i))
		}
		cl := splitCommandLine(p.Model, args)
		if len(cl.head) != 4 || len(cl.value) != n+2 || &cl.value[0] != &args[4] {
			t.Fatalf("%d args: kong is given %d tokens (want 4), command %d (want %d, not copied)", n, len(cl.head), len(cl.value), n+2)
		}
	}
}

// run runs the binary and returns stdout, stderr and the exit status.
func run(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// Each verb's --help is the same from its own grammar (what main builds for
// "dlbundle VERB ...") as from the whole CLI's.
func TestOneVerbGrammarHelpIsTheWholeCLIs(t *testing.T) {
	help := func(grammar any, args []string) string {
		var out bytes.Buffer
		p, err := kong.New(grammar, kong.Name("dlbundle"), kong.Writers(&out, &out), kong.Exit(func(int) { panic(&out) }))
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() { recover() }()
			p.Parse(args)
		}()
		return out.String()
	}
	n := 0
	for _, f := range reflect.VisibleFields(reflect.TypeFor[CLI]()) {
		if _, ok := f.Tag.Lookup("cmd"); !ok {
			continue
		}
		args := []string{commandName(f), "--help"}
		if _, whole := grammarFor(args).(*CLI); whole {
			t.Errorf("%s: no one-verb grammar (commandName %q does not match kong's name)", f.Name, args[0])
			continue
		}
		one, all := help(grammarFor(args), args), help(&CLI{}, args)
		if one != all || !strings.Contains(one, "Usage: dlbundle "+args[0]) {
			t.Errorf("dlbundle %s --help differs:\none verb:\n%s\nwhole CLI:\n%s", args[0], one, all)
		}
		n++
	}
	if n < 9 {
		t.Errorf("only %d verbs checked", n)
	}
}

func TestUsageErrorsAreOneLineAndExit2(t *testing.T) {
	bin := buildCLI(t)
	for _, c := range []struct {
		args       []string
		verb, says string
	}{
		{nil, "dlbundle:", `expected one of "trace"`},
		{[]string{"bogus"}, "dlbundle:", "unexpected argument bogus"},
		{[]string{"verify"}, "dlbundle verify:", `expected "<image>"`},
		{[]string{"verify", "--nope", "x.dlimg"}, "dlbundle verify:", "unknown flag --nope"},
		{[]string{"exec"}, "dlbundle exec:", `expected "<image>`},
		{[]string{"exec", "--"}, "dlbundle exec:", `expected "<image>`},
		{[]string{"exec", "img.dlimg"}, "dlbundle exec:", "no command to run"},
		{[]string{"exec", "img.dlimg", "--"}, "dlbundle exec:", "no command to run"},
		{[]string{"exec", "--bogus", "img.dlimg", "--", "/bin/true"}, "dlbundle exec:", "unknown flag --bogus"},
		{[]string{"exec", "--workers", "many", "img.dlimg", "--", "/bin/true"}, "dlbundle exec:", "--workers"},
		{[]string{"trace"}, "dlbundle trace:", "no command to run"},
		{[]string{"trace", "--"}, "dlbundle trace:", "no command to run"},
		{[]string{"build", "--level"}, "dlbundle build:", "--level"},
		{[]string{"exec", "--stage-dir"}, "dlbundle exec:", "--stage-dir: expected string value but got \"EOL\""},
		// -q prints nothing, --json one object: asked for both, say so (it printed the object)
		{[]string{"stage", "-q", "--json", "img.dlimg"}, "dlbundle stage:", "--quiet and --json can't be used together"},
	} {
		stdout, stderr, code := run(t, bin, c.args...)
		verb := strings.TrimSuffix(strings.TrimPrefix(c.verb, "dlbundle "), ":")
		help := "see 'dlbundle " + verb + " --help'"
		if verb == "dlbundle" {
			help = "see 'dlbundle --help'"
		}
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.HasPrefix(stderr, c.verb+" ") || !strings.Contains(stderr, c.says) ||
			!strings.Contains(stderr, "; usage: dlbundle ") || !strings.HasSuffix(stderr, help+"\n") {
			t.Errorf("dlbundle %q: exit %d, stdout %q, stderr %q; want exit 2, no stdout, one line %q... %q", c.args, code, stdout, stderr, c.verb, help)
		}
	}
	// "exec IMG" and "exec IMG --" are the same mistake.
	_, e1, _ := run(t, bin, "exec", "img.dlimg")
	_, e2, _ := run(t, bin, "exec", "img.dlimg", "--")
	if e1 != e2 || !strings.Contains(e1, "usage: dlbundle exec <image> -- <command> ...") {
		t.Errorf("exec IMG: %q\nexec IMG --: %q", e1, e2)
	}
	if out, _, code := run(t, bin, "exec", "--help"); code != 0 || !strings.Contains(out, "Every rank of a job") {
		t.Errorf("exec --help: exit %d\n%s", code, out)
	}
}

func TestDocumentedExitStatusesHold(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.dlimg")
	// A missing input is a usage error for every verb (TestContract).
	if _, stderr, code := run(t, bin, "verify", missing); code != 2 || !strings.HasPrefix(stderr, "dlbundle verify: no image "+missing) {
		t.Errorf("verify of a missing image: exit %d, %q; want 2 (no such image)", code, stderr)
	}
	out, _, code := run(t, bin, "verify", "--help")
	if code != 0 || !strings.Contains(out, "1  the image is corrupt or unreadable") ||
		!strings.Contains(out, "2  usage error") || !strings.Contains(out, "3  the image is intact but stale") {
		t.Errorf("verify --help does not document 0/1/2/3: exit %d\n%s", code, out)
	}
	if out, _, code := run(t, bin, "--help"); code != 0 || !strings.Contains(out, "2 usage error") {
		t.Errorf("--help does not document the usage exit status: exit %d\n%s", code, out)
	}
	// A failure after parsing: exit 1, one line, the prefix names the verb only.
	junk := filepath.Join(dir, "junk.dlimg")
	os.WriteFile(junk, []byte("not an image"), 0o644)
	_, stderr, code := run(t, bin, "exec", "--stage-dir", dir, junk, "--", "/bin/true")
	if code != 1 || !strings.HasPrefix(stderr, "dlbundle exec: ") || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "<") {
		t.Errorf("exec of a file that is no image: exit %d, %q", code, stderr)
	}
	// A command that is not found: the shell's 127, as documented in exec.go.
	if _, _, code := run(t, bin, "exec", "--fallback", "--stage-dir", dir, missing, "--", "no-such-command-xyz"); code != 127 {
		t.Errorf("exec --fallback of a missing command: exit %d, want 127", code)
	}
}

// 100,000 arguments reach the app intact through exec and through trace
// (which parses the line twice: dlbundle, then its stub).
func TestHundredThousandArguments(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	script := `echo "$# $1 ${99999} ${100000}"`
	args := []string{"/bin/sh", "-c", script, "sh"}
	for i := 1; i <= 100_000; i++ {
		args = append(args, strconv.Itoa(i))
	}
	want := "100000 1 99999 100000\n"
	stdout, stderr, code := run(t, bin, append([]string{"exec", "--fallback", "--stage-dir", dir, filepath.Join(dir, "none.dlimg"), "--"}, args...)...)
	if code != 0 || stdout != want {
		t.Errorf("exec: exit %d, stdout %q, want %q\n%s", code, stdout, want, stderr)
	}
	stdout, stderr, code = run(t, bin, append([]string{"trace", "-q", "-o", filepath.Join(dir, "t.trace"), "--"}, args...)...)
	if code != 0 || stdout != want {
		t.Errorf("trace: exit %d, stdout %q, want %q\n%s", code, stdout, want, stderr)
	}
}

func TestBuildRefusesToOverwriteWhatIsNotAnImage(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	in := func(name string) string { return filepath.Join(dir, name) }
	writeTestTrace(t, in("dlbundle.trace"), "/usr/bin/env")
	traceBytes, _ := os.ReadFile(in("dlbundle.trace"))
	os.WriteFile(in("notes.txt"), []byte("precious\n"), 0o644)
	build := func(args ...string) (string, int) {
		cmd := exec.Command(bin, append([]string{"build"}, args...)...)
		cmd.Dir = dir
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return errb.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return errb.String(), 0
	}
	unchanged := func(name string, want []byte) {
		t.Helper()
		if b, _ := os.ReadFile(in(name)); !bytes.Equal(b, want) {
			t.Errorf("%s was overwritten", name)
		}
	}
	isImage := func(name string) {
		t.Helper()
		im, err := image.OpenFile(in(name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		im.Close()
	}

	// Its own input, named or by default, even with --force.
	for _, args := range [][]string{{"-o", "dlbundle.trace"}, {"-o", "dlbundle.trace", "dlbundle.trace"}, {"--force", "-o", "dlbundle.trace"}} {
		if msg, code := build(args...); code != 1 || !strings.Contains(msg, "is one of the input traces") {
			t.Errorf("build %q: exit %d, %q", args, code, msg)
		}
		unchanged("dlbundle.trace", traceBytes)
	}
	// Another trace, or any other file: refused unless --force.
	cp := in("other.trace")
	os.WriteFile(cp, traceBytes, 0o644)
	for _, name := range []string{"other.trace", "notes.txt"} {
		msg, code := build("-o", name)
		if code != 1 || msg != fmt.Sprintf("dlbundle build: -o %s exists and it is not a dlbundle image (no DLBUNDLE footer); refusing to overwrite it: choose another -o, or --force\n", name) {
			t.Errorf("build -o %s: exit %d, %q", name, code, msg)
		}
	}
	unchanged("other.trace", traceBytes)
	unchanged("notes.txt", []byte("precious\n"))
	if msg, code := build("--force", "-o", "notes.txt"); code != 0 {
		t.Errorf("build --force -o notes.txt: exit %d, %s", code, msg)
	}
	isImage("notes.txt")
	// An image (rebuilt in place) and an empty file (mktemp) are replaced.
	if msg, code := build("-o", "notes.txt"); code != 0 {
		t.Errorf("build -o over an image: exit %d, %s", code, msg)
	}
	os.WriteFile(in("empty"), nil, 0o600)
	if msg, code := build("-o", "empty"); code != 0 {
		t.Errorf("build -o over an empty file: exit %d, %s", code, msg)
	}
	isImage("empty")
	// A damaged image keeps its footer: still replaceable without --force.
	b, _ := os.ReadFile(in("empty"))
	b[len(b)/2] ^= 0xff
	os.WriteFile(in("damaged.dlimg"), b, 0o644)
	if msg, code := build("-o", "damaged.dlimg"); code != 0 {
		t.Errorf("build -o over a damaged image: exit %d, %s", code, msg)
	}
	isImage("damaged.dlimg")
}
