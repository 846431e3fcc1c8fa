package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/alecthomas/kong"
)

// Exit statuses shared by every verb (README, `dlbundle --help`). A verb may
// document more (verify: 3 stale); an app run by exec or trace exits with
// its own status.
const (
	exitFailure = 1 // the verb ran and failed
	exitUsage   = 2 // the command line is wrong; nothing was done
)

// usageError is a command-line mistake found after kong's parse (for
// example no command after --). main reports it as kong's own parse errors:
// one line, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// grammarFor returns what kong builds its model from for args: when they
// name a verb, a struct with that verb and CLI's global flags only; else
// (no verb yet, a flag before it, an unknown name) the whole CLI. kong's
// model of every verb (reflection, tags, help interpolated through regexps)
// costs ~1 ms and 400 KB on every rank's exec, the model of one verb a fifth
// of it; the verb's own struct, its flags and its Run are the same.
func grammarFor(args []string) any {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return &CLI{}
	}
	t := reflect.TypeFor[CLI]()
	var fields []reflect.StructField
	found := false
	for i := range t.NumField() {
		f := t.Field(i)
		f.Index, f.Offset = nil, 0
		if _, isCmd := f.Tag.Lookup("cmd"); !isCmd {
			fields = append(fields, f) // global flags
		} else if a := f.Tag.Get("aliases"); commandName(f) == args[0] || a != "" && contains(strings.Split(a, ","), args[0]) {
			fields = append(fields, f)
			found = true
		}
	}
	if !found {
		return &CLI{}
	}
	return reflect.New(reflect.StructOf(fields)).Interface()
}

// commandName is kong's name for a command field: its name tag, or the
// field's name dashed and lower-cased ("TraceStub" -> "trace-stub"). Where
// kong's rules differ (acronyms), no verb matches and grammarFor falls back
// to the whole CLI: slower, never wrong.
func commandName(f reflect.StructField) string {
	if n := f.Tag.Get("name"); n != "" {
		return n
	}
	var b strings.Builder
	for i, r := range f.Name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('-')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}

// parse parses args (os.Args[1:]) as kong would, in time linear in their
// number (splitCommandLine). A usage error comes with the context reached,
// for reportUsage.
func parse(parser *kong.Kong, args []string) (*kong.Context, error) {
	cl := splitCommandLine(parser.Model, args)
	head := cl.head
	if cl.cut {
		head = append(head, "--") // kong requires the command argument; setCommand fills it
	}
	ctx, err := parser.Parse(head)
	if err != nil {
		return ctx, err
	}
	if cl.cut {
		setCommand(ctx, cl)
	}
	return ctx, missingCommand(ctx)
}

// commandLine is os.Args[1:] split for kong.
type commandLine struct {
	head []string // what kong parses: the verb, its flags and its own arguments
	// value is the passthrough argument's value as kong would set it: the
	// app's command line, after the "--" that kong keeps (stripDashDash). It
	// is a subslice of args, not a copy: 100,000 arguments cost nothing here.
	value []string
	cut   bool // a passthrough verb: value was cut off head (maybe empty)
}

// splitCommandLine cuts the app's command line off a passthrough verb's
// arguments (exec IMAGE -- CMD..., trace -- CMD...) before kong sees them.
// kong's scanner pushes every token back onto the front of its slice, which
// copies the rest of the line each time: parsing is quadratic in the number
// of arguments (24 s for 10,000), and every rank of a job pays it. The cut
// follows kong's own rules, so the result is the same as kong's: the command
// starts at the first "--", at the first positional argument after the
// verb's own positionals, or at the first unknown flag there (kong's
// passthrough mode "all"). Flags that take a value skip it, in every
// spelling kong accepts (--f v, --f=v, -o v, -ov, -qo v).
func splitCommandLine(app *kong.Application, args []string) commandLine {
	all := commandLine{head: args}
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		i++ // top-level flags (--help, --version) take no value
	}
	if i == len(args) {
		return all
	}
	var verb *kong.Node
	for _, n := range app.Children {
		if n.Type == kong.CommandNode && (n.Name == args[i] || contains(n.Aliases, args[i])) {
			verb = n
		}
	}
	if verb == nil {
		return all
	}
	own := -1 // number of positionals before the passthrough one
	for k, p := range verb.Positional {
		if p.Passthrough {
			own = k
			break
		}
	}
	if own < 0 {
		return all
	}
	long, short := map[string]bool{}, map[rune]bool{} // flag -> takes a value
	for _, group := range verb.AllFlags(false) {
		for _, f := range group {
			v := !f.IsBool() && !f.IsCounter()
			long[f.Name] = v
			for _, a := range f.Aliases {
				long[a] = v
			}
			if f.Tag.Negatable != "" {
				long["no-"+f.Name] = false
			}
			if f.Short != 0 {
				short[f.Short] = v
			}
		}
	}
	cut := func(at int) commandLine {
		return commandLine{head: args[:at:at], value: args[at:], cut: true}
	}
	seen := 0
	for i++; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if seen == own {
				return commandLine{head: args[:i:i], value: args[i:], cut: true}
			}
			// "verb -- IMAGE CMD...": the rest is positional.
			if at := i + 1 + own - seen; at <= len(args) {
				return cut(at)
			}
			return all // too few arguments: kong's to report
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			takes, known := long[name]
			if !known && seen == own {
				return cut(i)
			}
			if takes && !hasValue {
				i++
			}
		case strings.HasPrefix(a, "-") && a != "-":
			if _, known := short[rune(a[1])]; !known && seen == own {
				return cut(i)
			}
			for k, c := range a[1:] {
				takes, known := short[c]
				if !known {
					// "-q000": kong reads an unknown short flag inside a
					// cluster as the start of the command and splits it
					// ("-0", "00"); the whole line is kong's to parse, as it
					// was before the split (found by FuzzSplitCommandLine).
					return all
				}
				if takes {
					if k+1 == len(a[1:]) {
						i++ // -o VALUE; otherwise the rest of the token is the value
					}
					break
				}
			}
		default:
			if seen == own {
				return cut(i)
			}
			seen++
		}
	}
	if i > len(args) {
		return all // a flag without its value at the end: kong's to report
	}
	// No command: kong still gets "--" so that "exec IMG" and "exec IMG --"
	// read the same (missingCommand).
	return cut(i)
}

// setCommand stores the command cut off by splitCommandLine in the selected
// verb's passthrough argument, as kong would have.
func setCommand(kctx *kong.Context, cl commandLine) {
	for _, p := range kctx.Selected().Positional {
		if p.Passthrough {
			p.Target.Set(reflect.ValueOf(cl.value))
		}
	}
}

// missingCommand is a usage error when the selected verb runs a command and
// none was given: "exec IMG", "exec IMG --" and "trace --" alike (env's
// command is optional).
func missingCommand(kctx *kong.Context) error {
	for _, p := range kctx.Selected().Positional {
		if p.Passthrough && p.Required && len(stripDashDash(p.Target.Interface().([]string))) == 0 {
			return usageError{"no command to run: put the app and its arguments after --"}
		}
	}
	return nil
}

// usageLine is the one line printed for a usage error: what is wrong, the
// verb's usage, and where the rest is.
func usageLine(kctx *kong.Context, err error) string {
	node := (*kong.Node)(nil)
	if kctx != nil {
		node = kctx.Selected()
	}
	if node == nil {
		return fmt.Sprintf("dlbundle: %v; usage: dlbundle <command> [flags]; see 'dlbundle --help'", err)
	}
	usage := node.Summary()
	for _, p := range node.Positional {
		if p.Passthrough { // kong's summary leaves out the "--" a user needs
			usage = strings.Replace(usage, p.Summary(), "-- "+p.Summary(), 1)
		}
	}
	return fmt.Sprintf("dlbundle %s: %v; usage: dlbundle %s; see 'dlbundle %s --help'",
		verbName(kctx), err, usage, verbName(kctx))
}

// verbName is the verb of an error message: "exec", not kong's
// "exec <image> <command>".
func verbName(kctx *kong.Context) string {
	if n := kctx.Selected(); n != nil {
		if n.Name == "__trace-stub" {
			return "trace"
		}
		return n.Name
	}
	return ""
}

// reportUsage prints the usage line of err and exits 2.
func reportUsage(kctx *kong.Context, err error) {
	var pe *kong.ParseError
	if errors.As(err, &pe) {
		err, kctx = pe.Unwrap(), pe.Context
	}
	if os.Getenv(launcherEnv) != "" {
		// A launcher plugin wrote this command line, not the user: its
		// usage would name a command the user never typed; the input
		// the user gave (the image) and the launcher's hint are the news.
		fmt.Fprintf(os.Stderr, "dlbundle %s: %v %s\n", verbName(kctx), err, fallbackHint())
		os.Exit(exitUsage)
	}
	fmt.Fprintln(os.Stderr, usageLine(kctx, err))
	os.Exit(exitUsage)
}

func contains(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}
