package main

import (
	"reflect"
	"strconv"
	"strings"
	"time"
)

// quickExec reads a plain `exec` command line (os.Args[1:]) into an ExecCmd
// without kong, or says it cannot (ok false), and main hands the line to
// kong as for any other verb. Every rank of a job runs exec, and kong's
// model of even one verb (reflection over its struct, help text
// interpolated through regexps, a reflective call of Run) cost ~85 of a
// warm exec's ~610 minor page faults and ~0.5 ms (docs/bench/cli.md).
//
// It accepts only what kong reads the same way, and declines the rest:
// the verb "exec", then ExecCmd's long flags (--name value, --name=value,
// --bool; each at most once; a separate value not starting with "-"; ints
// in plain decimal), the image, then the command after "--" or from the
// first argument that is not a flag. Short flags, --help, --version,
// unknown flags, a missing image or command: kong's, with its messages.
// Flags, defaults and environment variables come from ExecCmd's struct
// tags, so a new flag is read here too, or declined if of a kind this does
// not know. FuzzQuickExecMatchesKong compares the two.
func quickExec(args []string, lookupEnv func(string) (string, bool)) (c *ExecCmd, ok bool) {
	if len(args) < 3 || args[0] != "exec" {
		return nil, false
	}
	c = &ExecCmd{}
	v := reflect.ValueOf(c).Elem()
	flags, ok := execFlags(v)
	if !ok {
		return nil, false
	}
	given := make(map[string]bool, len(flags))
	image := false
	i := 1
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			if a != "--" && !image {
				c.Image, image = a, true
				continue
			}
			break // the command, with its "--" as kong keeps it
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		f, known := flags[name]
		if !strings.HasPrefix(a, "--") || !known || given[name] {
			return nil, false
		}
		given[name] = true
		target := v.FieldByIndex(f.index)
		if target.Kind() == reflect.Bool {
			if hasValue {
				return nil, false
			}
			target.SetBool(true)
			continue
		}
		if !hasValue {
			if i+1 == len(args) || strings.HasPrefix(args[i+1], "-") {
				return nil, false
			}
			i++
			value = args[i]
		}
		if !setFlag(target, value) {
			return nil, false
		}
	}
	if !image || len(stripDashDash(args[i:])) == 0 {
		return nil, false // kong's usage errors
	}
	c.Command = args[i:]
	for name, f := range flags {
		if given[name] {
			continue
		}
		value, set := f.def, f.def != ""
		if f.env != "" {
			if env, ok := lookupEnv(f.env); ok {
				value, set = env, true // the environment before the default, as kong
			}
		}
		if set && !setFlag(v.FieldByIndex(f.index), value) {
			return nil, false
		}
	}
	return c, true
}

// execFlag is one of ExecCmd's flags as kong reads its tags.
type execFlag struct {
	index    []int
	env, def string
}

// execFlags returns ExecCmd's flags by name, or false if one has a tag or
// a kind quickExec does not read as kong does.
func execFlags(v reflect.Value) (map[string]execFlag, bool) {
	t := v.Type()
	flags := make(map[string]execFlag, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if _, isArg := f.Tag.Lookup("arg"); isArg {
			continue
		}
		if !knownTags(f.Tag) {
			return nil, false
		}
		switch f.Type {
		case reflect.TypeFor[string](), reflect.TypeFor[bool](), reflect.TypeFor[int](), reflect.TypeFor[time.Duration]():
		default:
			return nil, false
		}
		env, def := f.Tag.Get("env"), f.Tag.Get("default")
		if f.Type.Kind() == reflect.Bool && (env != "" || def != "") || strings.Contains(def, "$") || strings.Contains(env, ",") {
			return nil, false // kong's bool spellings, ${var} interpolation and lists of variables are its own
		}
		flags[commandName(f)] = execFlag{index: f.Index, env: env, def: def}
	}
	return flags, true
}

// knownTags: the tag keys whose meaning quickExec follows (name, env,
// default) or that do not change parsing (help, placeholder).
func knownTags(tag reflect.StructTag) bool {
	for s := string(tag); s != ""; {
		s = strings.TrimLeft(s, " ")
		key, rest, ok := strings.Cut(s, ":")
		if !ok || len(rest) == 0 || rest[0] != '"' {
			return s == ""
		}
		switch key {
		case "name", "env", "default", "help", "placeholder":
		default:
			return false
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return false
		}
		s = rest[len(q):]
	}
	return true
}

// setFlag sets a string, int or duration flag from its text as kong would,
// or returns false where kong might read the text otherwise (ints not in
// plain decimal: kong takes 0x10 and 010 too).
func setFlag(target reflect.Value, s string) bool {
	switch target.Type() {
	case reflect.TypeFor[string]():
		target.SetString(s)
	case reflect.TypeFor[int]():
		if s == "" || len(s) > 1 && s[0] == '0' || strings.TrimLeft(s, "0123456789") != "" {
			return false
		}
		n, err := strconv.ParseInt(s, 10, strconv.IntSize)
		if err != nil {
			return false
		}
		target.SetInt(n)
	case reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(s)
		if err != nil {
			return false
		}
		target.SetInt(int64(d))
	default:
		return false
	}
	return true
}
