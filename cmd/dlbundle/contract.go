package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/node"
)

// The CLI contract (README "Command-line contract"), held for every verb by
// TestContract: a usage error or a missing input file is ONE line on stderr
// and exit 2, with nothing done; a failure is exit 1; exec and trace exit
// with the app's status. The helpers below give every verb that behaviour
// without each verb repeating it.

// runningVerb is the verb this process runs ("exec", "stage"...), for the
// messages drawn by helpers several verbs share (the progress bar).
var runningVerb string

// checkArgs rejects, before the verb runs, what would otherwise fail late or
// confusingly: "oci:/x" (one slash) would be read as a file path or a host
// named "oci:", and an input file that does not exist would fail deep inside
// the verb with exit 1. verb is the verb's struct, name its name. exec, env
// and stage are not checked for missing files here (asMissingInput maps their
// failure instead): every rank of a job runs exec, and a stat of the image on
// a shared file system from each rank is what dlbundle exists to avoid; a
// consumed image (stage --consume) is found by its path after the file is
// gone.
func checkArgs(verb any, name string) error {
	v := reflect.ValueOf(verb)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if _, isArg := f.Tag.Lookup("arg"); !isArg {
			continue
		}
		argName := f.Tag.Get("name")
		if argName == "" {
			argName = strings.ToLower(f.Name)
		}
		var values []string
		switch x := v.Field(i).Interface().(type) {
		case string:
			values = []string{x}
		case []string:
			values = x
		default:
			continue
		}
		if _, isCmd := f.Tag.Lookup("passthrough"); isCmd {
			// kong reads an unknown flag where the command may start as the
			// command ("trace --ouptut x -- app" would run "--ouptut"): no
			// app is named so; one that is can still be run after "--".
			if len(values) > 0 && strings.HasPrefix(values[0], "-") && values[0] != "--" {
				return usageError{fmt.Sprintf("unknown flag %s (the app and its arguments go after --)", values[0])}
			}
			continue
		}
		for _, s := range values {
			if err := badRef(s); err != nil {
				return err
			}
			if !inputArgs[argName] || name == "exec" || name == "stage" || name == "env" {
				continue
			}
			if err := missingInput(s, argName); err != nil {
				return err
			}
		}
	}
	return nil
}

// inputArgs are the positional arguments (kong names) that name a file the
// verb reads: a missing one is a usage error.
var inputArgs = map[string]bool{"image": true, "trace": true, "file": true}

// badRef reports an argument that looks meant as a registry reference but is
// not one: "oci:/x", "oci:x" (a path never starts with "oci:" by accident).
func badRef(s string) error {
	if strings.HasPrefix(s, "oci:") && !registry.IsRef(s) {
		return usageError{fmt.Sprintf("%s: a registry reference starts with %s (two slashes), e.g. %sregistry.example.org/apps/myapp:v1",
			s, registry.Scheme, registry.Scheme)}
	}
	return nil
}

// refBeforeParse is the "oci:/x" among args, if any, to report instead of
// kong's parse error: kong checks an existing file (extract, push) before
// checkArgs could see it, and would say "no such file" about it. The app's
// own arguments (after "--") are not dlbundle's.
func refBeforeParse(args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if bad := badRef(a); bad != nil {
			return bad
		}
	}
	return nil
}

// missingInput is a usage error if the input file s (argument argName) does
// not exist. A trace also exists as its per-rank files s.0, s.1... (what a
// pilot under a launcher writes).
func missingInput(s, argName string) error {
	if s == "" || registry.IsRef(s) {
		return nil
	}
	if _, err := os.Stat(s); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if argName == "trace" && len(rankFiles(s)) > 0 {
		return nil
	}
	return usageError{noSuchInput(s, argName)}
}

// noSuchInput is the text of a missing input file s, with how to make one.
func noSuchInput(s, argName string) string {
	switch argName {
	case "image":
		return fmt.Sprintf("no image %s (make one with 'dlbundle build -o FILE' or 'dlbundle pull')", s)
	case "trace":
		return fmt.Sprintf("no trace %s (record one with 'dlbundle trace -o %s -- CMD')", s, s)
	}
	return fmt.Sprintf("no file %s", s)
}

// asMissingInput turns a failure that is a missing input file of the verb
// (exec and stage find out only when they open the image, or from the rank
// that staged for the node) into the usage error the contract promises, or
// returns nil.
func asMissingInput(err error, ctx func() *kong.Context) error {
	var pe *fs.PathError
	elsewhere := errors.Is(err, node.ErrStagedElsewhere)
	if !elsewhere && (!errors.As(err, &pe) || !errors.Is(pe.Err, fs.ErrNotExist)) {
		return nil
	}
	kctx := ctx() // only now: on exec's path it costs kong's parse
	if kctx == nil || kctx.Selected() == nil {
		return nil
	}
	var want string
	if pe != nil {
		want, _ = filepath.Abs(pe.Path)
	}
	for _, p := range kctx.Selected().Positional {
		if !inputArgs[p.Name] {
			continue
		}
		var values []string
		switch x := p.Target.Interface().(type) {
		case string:
			values = []string{x}
		case []string:
			values = x
		}
		for _, s := range values {
			if abs, _ := filepath.Abs(s); abs == want && s != "" {
				return usageError{noSuchInput(s, p.Name)}
			}
			// The rank that staged for this node found no image and told
			// the others so: they say what it said (one stat, on the way
			// out: the image is not read).
			if _, serr := os.Stat(s); elsewhere && s != "" && !registry.IsRef(s) && errors.Is(serr, fs.ErrNotExist) {
				return usageError{noSuchInput(s, p.Name)}
			}
		}
	}
	return nil
}

// VersionCmd prints the version, as --version and -v do.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(k *kong.Kong) error {
	fmt.Fprintln(k.Stdout, k.Model.Vars()["version"])
	return nil
}

// HelpCmd prints the help of dlbundle or of one verb.
type HelpCmd struct {
	Verb []string `arg:"" optional:"" name:"command" help:"The command to explain (e.g. exec)."`
}

// Run prints the help asked for, as 'dlbundle [VERB] --help' does.
func (c *HelpCmd) Run() error {
	args := append(append([]string{}, c.Verb...), "--help")
	parser, err := newParser(args)
	if err != nil {
		return err
	}
	_, err = parse(parser, args) // --help prints and exits 0
	if err != nil {
		return usageError{err.Error()}
	}
	return nil
}

// withRankFiles replaces each name that does not exist but has per-rank
// files name.0, name.1... (what 'trace -o name' writes under a launcher, one
// file per rank) by those files, in rank order; other names stay as given
// (a missing one is then reported by whoever opens it). So the name given
// to trace -o is the name build and inspect --trace take.
func withRankFiles(names []string) []string {
	var out []string
	for _, name := range names {
		ranks := rankFiles(name)
		if len(ranks) == 0 {
			out = append(out, name)
			continue
		}
		out = append(out, ranks...)
	}
	return out
}

// rankFiles are name's per-rank files name.N (N decimal), sorted by N, when
// name itself does not exist; else nil.
func rankFiles(name string) []string {
	if name == "" || registry.IsRef(name) {
		return nil
	}
	if _, err := os.Lstat(name); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	matches, _ := filepath.Glob(globEscape(name) + ".[0-9]*")
	type ranked struct {
		path string
		rank int
	}
	var rs []ranked
	for _, m := range matches {
		n, err := strconv.Atoi(strings.TrimPrefix(m, name+"."))
		if err != nil || n < 0 || !strings.HasPrefix(m, name+".") {
			continue
		}
		rs = append(rs, ranked{m, n})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].rank < rs[j].rank })
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.path)
	}
	return out
}

// globEscape quotes the characters filepath.Match treats as patterns.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
