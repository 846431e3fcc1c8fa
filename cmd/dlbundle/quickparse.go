package main

import (
	"reflect"
	"strconv"
	"strings"
	"time"
)

// quickParse reads a plain command line of a verb that runs an app (exec,
// trace) without kong, or says it cannot (ok false), and main hands the
// line to kong as for any other verb. Every rank of a job runs exec, and
// kong's model of even one verb (reflection over its struct, help text
// interpolated through regexps, a reflective call of Run) cost ~60 of a
// warm exec's ~606 minor page faults and ~0.3 ms; a pilot run pays the same
// before the app starts (docs/bench/cli.md, docs/bench/trace.md).
//
// It accepts only what kong reads the same way, and declines the rest: the
// verb, then its flags (--name value, --name=value, --bool, and a short
// flag alone: -q, -o VALUE; each flag at most once; a separate value not
// starting with "-"; ints in plain decimal), its own positional arguments
// (exec's image), then the command, after "--" or from the first argument
// that is not a flag. Clustered short flags (-qo), --help, --version,
// unknown flags, a missing argument or command: kong's, with its messages.
// Flags, defaults and environment variables come from the verb's struct
// tags, so a new flag is read here too, or declined if of a kind this does
// not know. FuzzQuickParseMatchesKong compares the two.
func quickParse(args []string, lookupEnv func(string) (string, bool)) (verb interface{ Run() error }, ok bool) {
	if len(args) < 2 || quickVerbs[args[0]] == nil {
		return nil, false
	}
	verb = quickVerbs[args[0]]()
	if hasKongHooks(reflect.TypeOf(verb)) {
		return nil, false
	}
	v := reflect.ValueOf(verb).Elem()
	g, ok := grammarOf(v.Type())
	if !ok {
		return nil, false
	}
	given := make(map[string]bool, len(g.flags))
	next := 0 // the next of the verb's own positional arguments
	i := 1
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			if a == "--" || next == len(g.positional) {
				break // the command, with its "--" as kong keeps it
			}
			v.FieldByIndex(g.positional[next]).SetString(a)
			next++
			continue
		}
		var name, value string
		var hasValue bool
		if strings.HasPrefix(a, "--") {
			name, value, hasValue = strings.Cut(a[2:], "=")
		} else if len(a) == 2 {
			name = g.short[a[1]] // "" (unknown) for a short flag it does not have
		}
		f, known := g.flags[name]
		if !known || given[name] {
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
	if next < len(g.positional) || len(stripDashDash(args[i:])) == 0 {
		return nil, false // kong's usage errors
	}
	v.FieldByIndex(g.command).Set(reflect.ValueOf(args[i:]))
	for name, f := range g.flags {
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
	// kong validates the verb after parsing: so does the quick path, and
	// leaves a rejected line to kong, which reports it.
	if val, ok := verb.(interface{ Validate() error }); ok && val.Validate() != nil {
		return nil, false
	}
	return verb, true
}

// quickVerbs are the verbs quickParse reads: those that run an app.
var quickVerbs = map[string]func() interface{ Run() error }{
	"exec":  func() interface{ Run() error } { return &ExecCmd{} },
	"trace": func() interface{ Run() error } { return &TraceCmd{} },
}

// hasKongHooks reports whether kong would call a method of the verb's type
// besides Run and Validate while it parses (hooks with kong's own
// arguments): such a verb is left to kong.
func hasKongHooks(t reflect.Type) bool {
	for _, m := range []string{"BeforeReset", "BeforeResolve", "BeforeApply", "AfterApply", "AfterRun"} {
		if _, ok := t.MethodByName(m); ok {
			return true
		}
	}
	return false
}

// verbGrammar is a verb's command line as kong reads its struct tags.
type verbGrammar struct {
	flags      map[string]quickFlag // by long name
	short      map[byte]string      // short name -> long name
	positional [][]int              // the verb's own string arguments, in order
	command    []int                // the passthrough []string argument
}

// quickFlag is one flag of a verb.
type quickFlag struct {
	index    []int
	env, def string
}

// grammarOf returns the grammar of a verb's struct type, or false if a field
// has a tag or a kind quickParse does not read as kong does.
func grammarOf(t reflect.Type) (verbGrammar, bool) {
	g := verbGrammar{flags: map[string]quickFlag{}, short: map[byte]string{}}
	if !g.read(t, nil) {
		return g, false
	}
	return g, g.command != nil
}

// read adds the fields of struct type t, whose place in the verb is at
// index (nil: the verb itself), to the grammar; kong's embedded structs
// (`embed:""`, a set of flags verbs share) are read in place, as kong does.
func (g *verbGrammar) read(t reflect.Type, at []int) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		f.Index = append(append([]int(nil), at...), f.Index...)
		if !knownTags(f.Tag) {
			return false
		}
		if _, embed := f.Tag.Lookup("embed"); embed {
			if f.Type.Kind() != reflect.Struct || !g.read(f.Type, f.Index) {
				return false
			}
			continue
		}
		if _, isArg := f.Tag.Lookup("arg"); isArg {
			_, passthrough := f.Tag.Lookup("passthrough")
			switch {
			case passthrough && f.Type == reflect.TypeFor[[]string]() && g.command == nil:
				g.command = f.Index
			case !passthrough && f.Type == reflect.TypeFor[string]() && g.command == nil && f.Tag.Get("default") == "":
				g.positional = append(g.positional, f.Index)
			default:
				return false
			}
			continue
		}
		switch f.Type {
		case reflect.TypeFor[string](), reflect.TypeFor[bool](), reflect.TypeFor[int](), reflect.TypeFor[time.Duration]():
		default:
			return false
		}
		env, def, short := f.Tag.Get("env"), f.Tag.Get("default"), f.Tag.Get("short")
		if f.Type.Kind() == reflect.Bool && (env != "" || def != "") || strings.Contains(def, "$") || strings.Contains(env, ",") {
			return false // kong's bool spellings, ${var} interpolation and lists of variables are its own
		}
		name := commandName(f)
		g.flags[name] = quickFlag{index: f.Index, env: env, def: def}
		if short != "" {
			if len(short) != 1 || short[0] == '-' || short[0] >= 0x80 {
				return false
			}
			g.short[short[0]] = name
		}
	}
	return true
}

// knownTags: the tag keys whose meaning quickParse follows (name, short,
// env, default, arg, passthrough, embed) or that do not change parsing (help,
// placeholder).
func knownTags(tag reflect.StructTag) bool {
	for s := string(tag); s != ""; {
		s = strings.TrimLeft(s, " ")
		key, rest, ok := strings.Cut(s, ":")
		if !ok || len(rest) == 0 || rest[0] != '"' {
			return s == ""
		}
		switch key {
		case "name", "short", "env", "default", "arg", "passthrough", "help", "placeholder", "embed":
		default:
			return false
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return false
		}
		if key == "passthrough" && q != `""` {
			return false // kong's passthrough modes other than the default
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
