package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/alecthomas/kong"
)

// FuzzSplitCommandLine: for any command line of a passthrough verb, main's
// split parse (one verb's grammar, the command cut off) and kong alone over
// the whole CLI agree on success and on the verb's struct.
func FuzzSplitCommandLine(f *testing.F) {
	for _, s := range []string{
		"exec\x00img\x00--\x00/bin/echo\x00a",
		"exec\x00--debug\x00--workers\x003\x00img\x00echo\x00-x",
		"exec\x00--stage-dir=--\x00img\x00--\x00--",
		"trace\x00-qo\x00f\x00--\x00sh",
		"trace\x00-o\x00--\x00sh",
		"__trace-stub\x00--\x00true",
		"exec\x00img\x00--bogus\x00x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		if len(args) > 64 || !utf8.ValidString(line) {
			// kong alone turns invalid UTF-8 into U+FFFD; the split passes
			// the app's arguments through as bytes (non-UTF-8 file names).
			return
		}
		parseOne := func(split bool) (v any, err error, exited bool) {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(kongExited); !ok {
						panic(r)
					}
					exited = true
				}
			}()
			opts := []kong.Option{kong.Writers(io.Discard, io.Discard), kong.Exit(func(int) { panic(kongExited{}) })}
			var p *kong.Kong
			if split {
				p, err = newParser(args, opts...)
			} else {
				p, err = kong.New(&CLI{}, opts...)
			}
			if err != nil {
				t.Fatal(err)
			}
			var ctx *kong.Context
			if split {
				ctx, err = parse(p, args)
			} else {
				ctx, err = p.Parse(args)
			}
			if err != nil {
				return nil, err, false
			}
			return ctx.Selected().Target.Interface(), nil, false
		}
		got, gerr, gexit := parseOne(true)
		want, werr, wexit := parseOne(false)
		if gexit || wexit {
			if gexit != wexit {
				t.Fatalf("%q: --help/--version exit: split %v, kong %v", args, gexit, wexit)
			}
			return
		}
		if werr != nil {
			return // kong rejects it; split may reject it differently (missing command)
		}
		if gerr != nil {
			if _, ok := gerr.(usageError); ok {
				return // kong alone accepts "exec IMG --"; main calls it a usage error
			}
			t.Fatalf("%q: split: %v, kong accepts it", args, gerr)
		}
		if cl := splitCommandLine(kong.Must(&CLI{}).Model, args); len(cl.value) > 0 &&
			(strings.HasPrefix(cl.value[0], "-") && !strings.HasPrefix(cl.value[0], "--") ||
				strings.HasPrefix(cl.value[0], "--=")) {
			// A command starting with an unknown short flag or with "--=":
			// kong alone mangles it ("-000" becomes "-0", "00"; "--=x"
			// becomes "--", "x"); the split keeps it as given.
			return
		}
		if !reflect.DeepEqual(got, want) && !kongSplitAtEquals(got, want) {
			t.Fatalf("%q:\nsplit %+v\nkong  %+v", args, got, want)
		}
	})
}

// kongSplitAtEquals: got and want differ only in that kong alone cut the
// command's first word "--NAME=VALUE" (an option of the app, not of
// dlbundle) into "--NAME" and "VALUE"; the split passes the app's word on as
// given, which is what the app must see.
func kongSplitAtEquals(got, want any) bool {
	g, w := reflect.Indirect(reflect.ValueOf(got)), reflect.Indirect(reflect.ValueOf(want))
	gc, wc := g.FieldByName("Command"), w.FieldByName("Command")
	if !gc.IsValid() || !wc.IsValid() {
		return false
	}
	gcmd, wcmd := gc.Interface().([]string), wc.Interface().([]string)
	if len(gcmd) == 0 || len(wcmd) != len(gcmd)+1 || !strings.HasPrefix(gcmd[0], "--") ||
		gcmd[0] != wcmd[0]+"="+wcmd[1] || !reflect.DeepEqual(gcmd[1:], wcmd[2:]) {
		return false
	}
	// Everything but the command is the same.
	g2, w2 := reflect.New(g.Type()).Elem(), reflect.New(w.Type()).Elem()
	g2.Set(g)
	w2.Set(w)
	g2.FieldByName("Command").Set(reflect.ValueOf([]string(nil)))
	w2.FieldByName("Command").Set(reflect.ValueOf([]string(nil)))
	return reflect.DeepEqual(g2.Interface(), w2.Interface())
}

type kongExited struct{}
