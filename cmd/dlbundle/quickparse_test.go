package main

import (
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alecthomas/kong"
)

// mainParse is what main does with args without quickParse: one verb's
// grammar, the command line split (parse). It returns the selected verb's
// struct, or an error (also for --help and --version, which exit).
func mainParse(args []string) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(kongExited); !ok {
				panic(r)
			}
			v, err = nil, io.EOF
		}
	}()
	p, err := newParser(args, kong.Writers(io.Discard, io.Discard), kong.Exit(func(int) { panic(kongExited{}) }))
	if err != nil {
		return nil, err
	}
	ctx, err := parse(p, args)
	if err != nil {
		return nil, err
	}
	return ctx.Selected().Target.Interface(), nil
}

// The command lines of the docs and of job scripts take the quick path, with
// the struct kong gives; the rest is left to kong.
func TestQuickParseReadsPlainLinesAsKong(t *testing.T) {
	t.Setenv("DLBUNDLE_STAGE_DIR", "/env/stage")
	for _, line := range []string{
		"exec /lustre/me/app.dlimg -- ./myapp input.nml",
		"exec app.dlimg ./myapp -n 3",
		"exec --stage-dir /s img -- /bin/true",
		"exec --stage-dir=/s --workers 4 --timeout 1m --insecure oci://reg:5000/a/b:v1 -- python3 -c x",
		"exec --report r.txt --debug --fallback img -- cmd -- --stage-dir x",
		"exec img --debug -- cmd",
		"exec --workers=0 --report= img -- cmd",
		"trace -- ./myapp --input small.nml",
		"trace -o numpy.trace -- /usr/bin/python3 -c x",
		"trace -q --output=t -- ./run.sh",
		"trace ./app -q",
	} {
		args := strings.Fields(line)
		want, err := mainParse(args)
		if err != nil {
			t.Fatalf("%q: kong: %v", line, err)
		}
		got, ok := quickParse(args, os.LookupEnv)
		if !ok {
			t.Errorf("%q: quickParse declined a plain line", line)
			continue
		}
		if g := reflect.ValueOf(got).Elem().Interface(); !reflect.DeepEqual(g, want) {
			t.Errorf("%q:\nquick %+v\nkong  %+v", line, g, want)
		}
	}
	if v, _ := quickParse(strings.Fields("exec img -- cmd"), os.LookupEnv); v.(*ExecCmd).StageDir != "/env/stage" || v.(*ExecCmd).Timeout != 30*time.Second {
		t.Errorf("environment and defaults: %+v", v)
	}
	if _, ok := quickParse(strings.Fields("exec img -- cmd --help"), os.LookupEnv); !ok {
		t.Error("the app's own --help after -- is the app's: quickParse declined it")
	}
	for _, line := range []string{
		"exec --help",
		"exec -h img -- cmd",
		"exec --version img -- cmd",
		"exec --bogus img -- cmd",
		"exec img --bogus cmd",
		"exec img",
		"exec img --",
		"exec -- img cmd",
		"exec --workers 0x10 img -- cmd",
		"exec --workers 010 img -- cmd",
		"exec --workers -1 img -- cmd",
		"exec --timeout 3 img -- cmd",
		"exec --debug=true img -- cmd",
		"exec --debug --debug img -- cmd",
		"exec --stage-dir -- img cmd",
		"trace -qo t -- /bin/true",
		"trace -ot -- /bin/true",
		"trace -q -q -- /bin/true",
		"trace -x -- /bin/true",
		"trace --",
		"trace -o -- /bin/true",
		"__trace-stub -- /bin/true",
		"build -o app.dlimg a.trace",
	} {
		if _, ok := quickParse(strings.Fields(line), os.LookupEnv); ok {
			t.Errorf("%q: quickParse read it; it is kong's (help, a usage error, or a spelling kong reads its own way)", line)
		}
	}
}

// FuzzQuickParseMatchesKong: whatever the command line and DLBUNDLE_STAGE_DIR,
// a line quickParse reads gives the verb's struct main's kong parse gives.
func FuzzQuickParseMatchesKong(f *testing.F) {
	for _, s := range []string{
		"exec\x00img\x00--\x00/bin/echo\x00a",
		"exec\x00--debug\x00--workers\x003\x00img\x00echo\x00-x",
		"exec\x00--stage-dir=--\x00img\x00--\x00--",
		"exec\x00--timeout\x001h2m\x00--report=\x00img\x00--debug\x00cmd",
		"exec\x00--workers=9223372036854775807\x00img\x00c",
		"exec\x00img\x00--\x00--\x00x",
		"exec\x00--workers\x00010\x00img\x00--\x00x",
		"exec\x00--workers=0x10\x00--timeout=1\x00img\x00x",
		"exec\x00--debug=false\x00img\x00x",
		"trace\x00-q\x00-o\x00f\x00--\x00sh",
		"trace\x00--output=f\x00sh\x00-q",
		"trace\x00-qo\x00f\x00--\x00sh",
		"exec\x00-h\x00img\x00x",
	} {
		f.Add(s, "/stage", true)
		f.Add(s, "", false)
	}
	f.Fuzz(func(t *testing.T, line, env string, envSet bool) {
		args := strings.Split(line, "\x00")
		if len(args) > 64 || !utf8.ValidString(line) || !utf8.ValidString(env) || strings.ContainsRune(env, 0) {
			// kong turns invalid UTF-8 into U+FFFD (quickParse keeps the
			// bytes of a file name); an environment value has no NUL.
			return
		}
		old, had := os.LookupEnv("DLBUNDLE_STAGE_DIR")
		defer func() {
			if had {
				os.Setenv("DLBUNDLE_STAGE_DIR", old)
			} else {
				os.Unsetenv("DLBUNDLE_STAGE_DIR")
			}
		}()
		if envSet {
			os.Setenv("DLBUNDLE_STAGE_DIR", env)
		} else {
			os.Unsetenv("DLBUNDLE_STAGE_DIR")
		}
		got, ok := quickParse(args, os.LookupEnv)
		if !ok {
			return // kong's line
		}
		want, err := mainParse(args)
		if err != nil {
			t.Fatalf("%q: quickParse read it, kong: %v", args, err)
		}
		if g := reflect.ValueOf(got).Elem().Interface(); !reflect.DeepEqual(g, want) {
			t.Fatalf("%q:\nquick %+v\nkong  %+v", args, g, want)
		}
	})
}

// A verb with a kong hook besides Run is left to kong, and one whose
// Validate rejects the line too: an option check added to exec that way
// (or by a hook) is never skipped by the quick path.
func TestQuickParseLeavesHooksToKong(t *testing.T) {
	if hasKongHooks(reflect.TypeFor[*ExecCmd]()) || hasKongHooks(reflect.TypeFor[*TraceCmd]()) {
		t.Fatal("exec or trace has a kong hook: quickParse never reads them")
	}
	if !hasKongHooks(reflect.TypeFor[*hookedVerb]()) {
		t.Error("AfterApply not seen")
	}
}

type hookedVerb struct{}

func (*hookedVerb) AfterApply() error { return nil }

func TestQuickParseValidates(t *testing.T) {
	quickVerbs["validated"] = func() interface{ Run() error } { return &validatedVerb{} }
	defer delete(quickVerbs, "validated")
	if _, ok := quickParse([]string{"validated", "--n", "2", "--", "cmd"}, os.LookupEnv); !ok {
		t.Error("a line Validate accepts was declined")
	}
	if _, ok := quickParse([]string{"validated", "--n", "1", "--", "cmd"}, os.LookupEnv); ok {
		t.Error("a line Validate rejects was read: kong would have reported it")
	}
}

type validatedVerb struct {
	N       int      `help:"even"`
	Command []string `arg:"" passthrough:""`
}

func (v *validatedVerb) Validate() error {
	if v.N%2 != 0 {
		return errors.New("odd")
	}
	return nil
}

func (*validatedVerb) Run() error { return nil }
