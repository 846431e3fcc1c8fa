package loader

// gettext catalogs an app binds itself (bindtextdomain on a directory of its
// tree) under dlbundle exec: glibc opens DIR/<language>/LC_MESSAGES/DOMAIN.mo
// with internal calls no preload sees, so the shim hands glibc the staged
// directory in bindtextdomain. A real program, traced, built and run under
// strace: the same output natively and under exec, in the pilot's language
// and in others, and no system call on the catalog tree under exec.

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

const gettextProgram = `#include <errno.h>
#include <libintl.h>
#include <locale.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
	if (!setlocale(LC_ALL, "")) { printf("setlocale failed\n"); return 1; }
	char *r = bindtextdomain("myapp", argv[1]);
	textdomain("myapp");
	char *q = bindtextdomain("myapp", NULL);
	printf("%s\n", gettext("hello"));
	printf("bound=%s\nquery=%s\n", r ? r : "(null)", q ? q : "(null)");
	printf("other=%s\n", dgettext("other", "hello"));
	/* A domain bound nowhere: glibc's default directory. */
	char *d = bindtextdomain("unbound", NULL);
	printf("unbound=%s\n", d ? d : "(null)");
	/* Rebinding to the same directory keeps the answer. */
	r = bindtextdomain("myapp", argv[1]);
	printf("again=%s %s\n", r ? r : "(null)", gettext("hello"));
	return 0;
}
`

// gettextFixture is a gettext app's tree (catalogs and the program) in
// dir/tree, traced in LANGUAGE=de_DE.UTF-8, built and staged (cold).
type gettextFixture struct {
	dir, tree, locale string
	cmd               []string // the app and its catalog directory
	execArgs          []string // dlbundle exec ... -- cmd
	stage             string
}

// env: the tests' environment in C.UTF-8 with LANGUAGE=lang. LANGUAGE is
// honoured when LC_MESSAGES is not "C" (glibc's guess_category_value
// compares the name): C.UTF-8 is enough.
func (f *gettextFixture) env(lang string) []string {
	return append(clitest.CleanEnv(f.dir), "LC_ALL=C.UTF-8", "LANGUAGE="+lang)
}

// newGettextFixture traces the app with LANGUAGE=pilot ("": none).
func newGettextFixture(t *testing.T, pilot string) *gettextFixture {
	needTools(t, "gcc", "strace", "msgfmt")
	bin := clitest.CLI(t)
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	locale := filepath.Join(tree, "share", "locale")
	// Catalogs in three languages (one with a second domain, one with an
	// LC_TIME directory), a language directory without LC_MESSAGES, and a
	// file among the languages (glibc's candidates below it are ENOTDIR).
	for lang, msg := range map[string]string{"de": "Hallo", "fr": "Bonjour", "es_ES": "Hola"} {
		lc := filepath.Join(locale, lang, "LC_MESSAGES")
		if err := os.MkdirAll(lc, 0o755); err != nil {
			t.Fatal(err)
		}
		po := filepath.Join(dir, lang+".po")
		if err := os.WriteFile(po, []byte("msgid \"hello\"\nmsgstr \""+msg+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("msgfmt", "-o", filepath.Join(lc, "myapp.mo"), po).CombinedOutput(); err != nil {
			t.Fatalf("msgfmt: %v\n%s", err, out)
		}
	}
	for _, d := range []string{filepath.Join(locale, "ja"), filepath.Join(locale, "fr", "LC_TIME")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(locale, "README"), []byte("catalogs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(locale, "de", "LC_MESSAGES", "other.mo"), []byte("not a catalog"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.c"), []byte(gettextProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(tree, "bin", "app")
	if out, err := exec.Command("gcc", "-O1", "-o", app, filepath.Join(dir, "app.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}

	f := &gettextFixture{dir: dir, tree: tree, locale: locale, cmd: []string{app, locale}}
	envFor, cmd := f.env, f.cmd
	runIn(t, dir, envFor(pilot), bin, append([]string{"trace", "--"}, cmd...)...)
	runIn(t, dir, envFor(pilot), bin, "build", "-o", "app.dlimg", "--include", tree)
	execArgs := append([]string{bin, "exec", "--stage-dir", filepath.Join(dir, "stage"), filepath.Join(dir, "app.dlimg"), "--"}, cmd...)
	runIn(t, dir, envFor(pilot), execArgs[0], execArgs[1:]...) // stage (cold)
	f.execArgs = execArgs
	stages, _ := filepath.Glob(filepath.Join(dir, "stage", "sha256-*"))
	if len(stages) != 1 {
		t.Fatalf("stages after the first exec: %v", stages)
	}
	f.stage = stages[0]
	return f
}

func TestExecGettextCatalogsFromStage(t *testing.T) {
	// The pilot's language is a locale name: glibc probes its variants
	// (de_DE.UTF-8, de_DE.utf8, de_DE, de.UTF-8, de.utf8) before de.
	pilot := "de_DE.UTF-8"
	f := newGettextFixture(t, pilot)
	dir, tree, locale, cmd, execArgs, envFor := f.dir, f.tree, f.locale, f.cmd, f.execArgs, f.env

	underLocale := func(name, lang string, args ...string) (string, int, []string) {
		return f.callsOnLocale(t, name, lang, args...)
	}
	// The pilot's language; languages the pilot never used (it:fr falls
	// back to fr); it: none of the tree's (untranslated, every candidate
	// missing).
	for lang, want := range map[string]string{pilot: "Hallo", "it:fr": "Bonjour", "es_ES": "Hola", "it": "hello"} {
		native, nNative, _ := underLocale("native", lang, cmd...)
		for _, w := range []string{want + "\n", "bound=" + locale + "\n", "query=" + locale + "\n",
			"again=" + locale + " " + want + "\n", "unbound=/usr/share/locale\n"} {
			if !strings.Contains(native, w) {
				t.Fatalf("LANGUAGE=%s: native output lacks %q (is the check broken?):\n%s", lang, w, native)
			}
		}
		if nNative == 0 {
			t.Fatalf("LANGUAGE=%s: natively the program made no system call on %s: the check is broken", lang, locale)
		}
		under, n, report := underLocale("exec", lang, execArgs...)
		t.Logf("LANGUAGE=%s: system calls on the catalog tree: native %d, exec (warm) %d", lang, nNative, n)
		if under != native {
			t.Errorf("LANGUAGE=%s: the program prints something else under exec:\nnative:\n%s\nexec:\n%s", lang, native, under)
		}
		if n != 0 {
			t.Errorf("LANGUAGE=%s: under exec %d system calls still reached %s:\n%s", lang, n, locale, strings.Join(report, "\n"))
		}
	}

	// glibc joins a LANGUAGE entry to the directory as it is, ".." too:
	// share/other is not in the image (made after the build), so the shim
	// leaves such a binding to glibc and the program finds that catalog as
	// natively (from the stage it would not).
	odir := filepath.Join(tree, "share", "other", "de", "LC_MESSAGES")
	if err := os.MkdirAll(odir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.po"), []byte("msgid \"hello\"\nmsgstr \"Servus\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("msgfmt", "-o", filepath.Join(odir, "myapp.mo"), filepath.Join(dir, "other.po")).CombinedOutput(); err != nil {
		t.Fatalf("msgfmt: %v\n%s", err, out)
	}
	dotdot := runIn(t, dir, envFor("../other/de"), cmd[0], cmd[1:]...)
	dotdotExec := runIn(t, dir, envFor("../other/de"), execArgs[0], execArgs[1:]...)
	if !strings.HasPrefix(dotdot, "Servus\n") || dotdotExec != dotdot {
		t.Errorf("LANGUAGE=../other/de: native:\n%s\nexec:\n%s", dotdot, dotdotExec)
	}

	// A relative directory is joined to the cwd by glibc at lookup time:
	// the shim passes it through, and the program sees what it sees natively.
	rel := []string{cmd[0], "share/locale"}
	relNative := runIn(t, tree, envFor("fr"), rel[0], rel[1:]...)
	relExec := runIn(t, tree, envFor("fr"), execArgs[0], append(execArgs[1:len(execArgs)-2], rel...)...)
	if !strings.Contains(relNative, "Bonjour\nbound=share/locale\nquery=share/locale\n") || relExec != relNative {
		t.Errorf("relative dirname: native:\n%s\nexec:\n%s", relNative, relExec)
	}
}

// callsOnLocale runs args under strace with LANGUAGE=lang: the output, and
// the system calls on the catalog tree (how many, and one line of each path).
func (f *gettextFixture) callsOnLocale(t *testing.T, name, lang string, args ...string) (out string, n int, report []string) {
	t.Helper()
	log := filepath.Join(f.dir, name+"-"+lang+".strace")
	out = runIn(t, f.dir, f.env(lang), "strace", append([]string{"-f", "-qq", "-y", "-s", "4096",
		"-e", "trace=%file,getdents64", "-o", log}, args...)...)
	for p, lines := range straceOps(t, log, f.dir) {
		if p == f.locale || strings.HasPrefix(p, f.locale+"/") {
			n += len(lines)
			report = append(report, p+"\n        e.g. "+lines[0])
		}
	}
	sort.Strings(report)
	return out, n, report
}

// A pilot in C.UTF-8 without LANGUAGE probes DIR/C.UTF-8/..., DIR/C.utf8/...
// and DIR/C/... (the locale's name is not "C"): that is enough for the build
// to bundle every language, and a run in French reads nothing on the tree.
func TestExecGettextPilotWithoutLanguage(t *testing.T) {
	f := newGettextFixture(t, "")
	native, nNative, _ := f.callsOnLocale(t, "native", "fr", f.cmd...)
	if !strings.HasPrefix(native, "Bonjour\n") || nNative == 0 {
		t.Fatalf("natively in French: %d calls on the tree, output:\n%s", nNative, native)
	}
	under, n, report := f.callsOnLocale(t, "exec", "fr", f.execArgs...)
	if under != native {
		t.Errorf("the program prints something else under exec:\nnative:\n%s\nexec:\n%s", native, under)
	}
	if n != 0 {
		t.Errorf("under exec %d system calls still reached %s:\n%s", n, f.locale, strings.Join(report, "\n"))
	}
}

// testGettextSanitized runs the app with the sanitized shim objects in
// the stage (ASan, UBSan): the same output as natively in the pilot's
// language and in another, and the binding was served from the stage.
func testGettextSanitized(t *testing.T, san *sanitizer) {
	f := newGettextFixture(t, "de_DE.UTF-8")
	san.install(t, f.stage)
	for lang, want := range map[string]string{"de_DE.UTF-8": "Hallo", "it:fr": "Bonjour"} {
		native := runIn(t, f.dir, san.env(f.env(lang)), f.cmd[0], f.cmd[1:]...)
		env := append(ShimEnv(f.stage, f.env(lang), EnvOptions{}), "DLBUNDLE_DEBUG=1")
		cmd := exec.Command(f.cmd[0], f.cmd[1:]...)
		cmd.Dir, cmd.Env = f.dir, san.env(env)
		var errb strings.Builder
		cmd.Stderr = &errb
		under, err := cmd.Output()
		if err != nil {
			t.Fatalf("LANGUAGE=%s under the sanitized shim: %v\n%s%s", lang, err, under, errb.String())
		}
		if !strings.HasPrefix(native, want+"\n") || string(under) != native {
			t.Errorf("LANGUAGE=%s: native:\n%s\nsanitized shim:\n%s", lang, native, under)
		}
		if !strings.Contains(errb.String(), "bindtextdomain bundled "+f.locale+" -> ") {
			t.Errorf("LANGUAGE=%s: the sanitized shim did not point glibc at the stage:\n%s", lang, errb.String())
		}
	}
}
