package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/internal/version"
	"github.com/dlbundle/dlbundle/node"
)

// contractCases are the cases of each verb beyond the ones TestContract makes
// from kong's model for every verb (an unknown flag; each input argument
// missing; "oci:/x" where an image or reference goes). Every verb of the CLI
// must be listed, so that a new verb gets its failure cases written, not
// forgotten. In args, {img} is an image, {probe} one that bundles a program
// at {orig}, {dir} an empty directory, {stages} a stage dir, {missing} a path
// that does not exist, {junk} a file that is no image, report or trace.
var contractCases = map[string][]contractCase{
	"trace": {
		{args: []string{"-o", "{dir}/t.trace", "--", "/bin/sh", "-c", "exit 5"}, exit: 5},
		{args: []string{"-o", "{dir}/t.trace", "--", "{missing}"}, exit: 127, says: "no such file"},
	},
	"build": {
		{args: []string{"-o", "{dir}/x.dlimg", "{junk}"}, exit: 1},
		{args: []string{"{junk}"}, exit: 2, says: "with -o"},
	},
	"exec": {
		{args: []string{"--stage-dir", "{stages}", "{probe}", "--", "{orig}", "exit7"}, exit: 7},
		{args: []string{"--stage-dir", "{stages}", "{junk}", "--", "/bin/true"}, exit: 1, says: "fallback"},
	},
	"env": {
		{args: []string{"--stage-dir", "{stages}", "{probe}"}, exit: 0},
		{args: []string{"--stage-dir", "{stages}", "{junk}"}, exit: 1},
	},
	"inspect": {{args: []string{"{junk}"}, exit: 1}},
	"verify":  {{args: []string{"{junk}"}, exit: 1}},
	"extract": {{args: []string{"{img}", "/proc/self"}, exit: 1}},
	"report":  {{args: []string{"{junk}"}, exit: 2, says: "not a dlbundle trace nor a process report"}},
	"push":    {{args: []string{"--timeout", "2s", "{img}", "127.0.0.1:1/x:y"}, exit: 1, says: "127.0.0.1:1"}},
	"pull":    {{args: []string{"--timeout", "2s", "-o", "{dir}", "127.0.0.1:1/x:y"}, exit: 1, says: "127.0.0.1:1"}},
	"stage":   {{args: []string{"--stage-dir", "{stages}", "{junk}"}, exit: 1}},
	"gc": {
		{args: []string{"--stage-dir", "{stages}", "--stage", "sha256-0123456789"}, exit: 2, says: "no stage sha256-0123456789"},
		{args: []string{"--stage-dir", "{stages}", "--keep", "lots"}, exit: 2, says: `--keep size "lots"`},
		{args: []string{"--stage-dir", "{junk}"}, exit: 1},
	},
	"ls":         {{args: []string{"--stage-dir", "{junk}"}, exit: 1}},
	"version":    {{args: nil, exit: 0}},
	"help":       {{args: []string{"exec"}, exit: 0}, {args: []string{"nosuchverb"}, exit: 2, says: "nosuchverb"}},
	"completion": {{args: []string{"bash"}, exit: 0}, {args: []string{"zsh"}, exit: 2, says: "zsh"}},
}

type contractCase struct {
	args []string
	exit int
	says string // in stderr, if set
}

// placeholders are the values the generated cases give each positional
// argument (by kong's name) of a verb, where they are not the one under test.
var placeholders = map[string][]string{
	"image":   {"{img}"},
	"trace":   {"{trace}"},
	"file":    {"{trace}"},
	"dir":     {"{dir}/out"},
	"ref":     {"oci://127.0.0.1:1/x:y"},
	"command": {"--", "/bin/true"},
	"shell":   {"bash"},
}

// TestContract holds every verb of the CLI to README's contract: a usage
// error or a missing input is one line on stderr, nothing on stdout, exit 2;
// a failure exits 1 with a line that names the verb; exec and trace exit with
// the app's status.
func TestContract(t *testing.T) {
	bin := buildCLI(t)
	work := t.TempDir()
	probe := clitest.NewProbeImage(t)
	img, _ := imageOfTree(t)
	junk := filepath.Join(work, "junk")
	if err := os.WriteFile(junk, []byte("neither image nor trace nor report\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expand := func(t *testing.T, args []string) []string {
		dir := t.TempDir()
		r := strings.NewReplacer("{img}", img, "{probe}", probe.Image, "{orig}", probe.Original, "{dir}", dir,
			"{stages}", filepath.Join(dir, "stages"), "{missing}", filepath.Join(dir, "missing"), "{junk}", junk,
			"{trace}", junk)
		out := make([]string, len(args))
		for i, a := range args {
			out[i] = r.Replace(a)
		}
		return out
	}
	parser, err := newParser(nil)
	if err != nil {
		t.Fatal(err)
	}
	verbs := 0
	for _, n := range parser.Model.Children {
		if n.Type != kong.CommandNode || n.Hidden {
			continue
		}
		verbs++
		cases, listed := contractCases[n.Name]
		if !listed {
			t.Errorf("verb %s has no contractCases: write its failure cases (missing input, failure, success)", n.Name)
		}
		cases = append(cases, contractCase{args: []string{"--no-such-flag"}, exit: 2, says: "--no-such-flag"})
		for k, p := range n.Positional {
			if _, ok := placeholders[p.Name]; !ok {
				t.Errorf("verb %s: argument <%s> has no placeholder in this test: add one", n.Name, p.Name)
				continue
			}
			args := func(v ...string) []string {
				var a []string
				for j, q := range n.Positional {
					if j == k {
						a = append(a, v...)
					} else {
						a = append(a, placeholders[q.Name]...)
					}
				}
				return a
			}
			if inputArgs[p.Name] {
				cases = append(cases, contractCase{args: args("{missing}.in"), exit: 2, says: "missing.in"})
			}
			if p.Name == "image" || p.Name == "ref" {
				cases = append(cases, contractCase{args: args("oci:/x"), exit: 2, says: "oci://"})
			}
		}
		for _, c := range cases {
			args := append([]string{n.Name}, expand(t, c.args)...)
			stdout, stderr, code := runContract(t, bin, args)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			last := lines[len(lines)-1]
			switch {
			case code != c.exit:
				t.Errorf("dlbundle %q: exit %d, want %d\nstderr: %s", args, code, c.exit, stderr)
			case c.says != "" && !strings.Contains(stderr, c.says):
				t.Errorf("dlbundle %q: stderr does not say %q: %s", args, c.says, stderr)
			case code == exitUsage && (stdout != "" || len(lines) != 1 || !strings.HasPrefix(last, "dlbundle "+n.Name+": ") || !strings.HasSuffix(stderr, "\n")):
				t.Errorf("dlbundle %q: want one line 'dlbundle %s: ...' on stderr and no stdout, got stdout %q stderr %q", args, n.Name, stdout, stderr)
			case code == exitFailure && !strings.HasPrefix(last, "dlbundle "+n.Name+": "):
				t.Errorf("dlbundle %q: exit 1 but the last line does not name the verb: %q", args, stderr)
			}
		}
	}
	if verbs < 15 {
		t.Errorf("only %d verbs found in the CLI's model", verbs)
	}
}

// TestVersionSpellings: 'dlbundle version', --version and -v print the same.
func TestVersionSpellings(t *testing.T) {
	bin := buildCLI(t)
	var first string
	for _, args := range [][]string{{"version"}, {"--version"}, {"-v"}} {
		stdout, stderr, code := runContract(t, bin, args)
		if code != 0 || stderr != "" || strings.Count(stdout, "\n") != 1 || stdout == "\n" {
			t.Errorf("dlbundle %s: exit %d, stdout %q, stderr %q", args[0], code, stdout, stderr)
		}
		if first == "" {
			first = stdout
		} else if stdout != first {
			t.Errorf("dlbundle %s printed %q, dlbundle version %q", args[0], stdout, first)
		}
	}
	help, _, _ := runContract(t, bin, []string{"--help"})
	viaVerb, _, code := runContract(t, bin, []string{"help"})
	if code != 0 || help != viaVerb || !strings.Contains(help, "exec") {
		t.Errorf("dlbundle help (exit %d) differs from --help:\n%s\n---\n%s", code, viaVerb, help)
	}
}

// TestBashCompletion sources the script in bash and completes a verb, a
// verb's flag, and after "--" a file.
func TestBashCompletion(t *testing.T) {
	bin := buildCLI(t)
	script, _, code := runContract(t, bin, []string{"completion", "bash"})
	if code != 0 {
		t.Fatalf("completion bash: exit %d", code)
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "c.bash")
	os.WriteFile(f, []byte(script), 0o644)
	os.WriteFile(filepath.Join(dir, "input.nml"), nil, 0o644)
	for _, c := range []struct {
		words string
		want  string
	}{
		{"dlbundle ins", "inspect"},
		{"dlbundle gc --sta", "--stage --stage-dir"},
		{"dlbundle exec --rep", "--report"},
		{"dlbundle exec app.dlimg -- ./myapp inp", "input.nml"},
		{"dlbundle help ex", "exec extract"},
	} {
		sh := `source ` + f + `; COMP_WORDS=(` + c.words + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _dlbundle; echo "${COMPREPLY[*]}"`
		cmd := exec.Command("bash", "--norc", "-c", sh)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("completing %q: %v %q, want %q", c.words, err, out, c.want)
		}
	}
}

func runContract(t *testing.T, bin string, args []string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	home := t.TempDir()
	cmd.Env = clitest.CleanEnv(home)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// TestMakeWithoutGoSaysSo: a clone built on a machine without Go on PATH is
// told so, instead of make building "bin/dlbundle-linux-.o".
func TestMakeWithoutGoSaysSo(t *testing.T) {
	bin := t.TempDir() // PATH: the tools make's recipes use, without go
	for _, tool := range []string{"sh", "sed", "git", "cat", "tr"} {
		if p, err := exec.LookPath(tool); err == nil {
			os.Symlink(p, filepath.Join(bin, tool))
		}
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(makeBin, "-C", "../..", "build")
	cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "'go' is not on PATH: install Go") || strings.Contains(string(out), "linux-.o") {
		t.Errorf("make build without Go: %v\n%s", err, out)
	}
}

// TestStageProgressNamesStage: stage stages through exec's code; on a
// terminal (script(1) gives it one) its bar and message say stage.
func TestStageProgressNamesStage(t *testing.T) {
	bin := buildCLI(t)
	img, _ := imageOfTree(t)
	stages := filepath.Join(t.TempDir(), "stages")
	cmd := exec.Command("script", "-qec", bin+" stage --stage-dir "+stages+" "+img, "/dev/null")
	cmd.Env = clitest.CleanEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dlbundle stage: staging "+img+" [") ||
		!strings.Contains(string(out), "dlbundle stage: staged "+img) || strings.Contains(string(out), "dlbundle exec") {
		t.Errorf("stage on a terminal: %v\n%q", err, out)
	}
}

// TestLsNamesImagesAndGcRemovesOneStage: ls says which image each stage is
// (text and --json); gc --stage removes that one stage only, and gc says why
// it kept what it kept.
func TestLsNamesImagesAndGcRemovesOneStage(t *testing.T) {
	bin := buildCLI(t)
	img, _ := imageOfTree(t)
	probe := clitest.NewProbeImage(t)
	stages := filepath.Join(t.TempDir(), "stages")
	for _, im := range []string{img, probe.Image} {
		if _, stderr, code := runContract(t, bin, []string{"stage", "--stage-dir", stages, im}); code != 0 {
			t.Fatalf("stage %s: exit %d: %s", im, code, stderr)
		}
	}
	out, _, code := runContract(t, bin, []string{"ls", "--stage-dir", stages})
	for _, want := range []string{"app.dlimg", img, "probe.dlimg", probe.Image, "2 stages"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("ls does not show %q (exit %d):\n%s", want, code, out)
		}
	}
	js, _, _ := runContract(t, bin, []string{"ls", "--json", "--stage-dir", stages})
	var listing struct {
		Stages []struct{ Name, Image, Ref string }
	}
	if err := json.Unmarshal([]byte(js), &listing); err != nil || len(listing.Stages) != 2 {
		t.Fatalf("ls --json: %v\n%s", err, js)
	}
	var victim string
	for _, s := range listing.Stages {
		if s.Ref == probe.Image && s.Image == "probe.dlimg" {
			victim = s.Name
		}
	}
	if victim == "" {
		t.Fatalf("ls --json has no stage of %s:\n%s", probe.Image, js)
	}
	prefix := victim[:len("sha256-")+10]
	out, _, code = runContract(t, bin, []string{"gc", "--stage-dir", stages, "--stage", prefix})
	if code != 1 || !strings.Contains(out, "kept "+victim) || !strings.Contains(out, "within --grace") {
		t.Errorf("gc --stage of a fresh stage: exit %d, want 1 and the reason it was kept:\n%s", code, out)
	}
	time.Sleep(node.MinGrace)
	out, _, code = runContract(t, bin, []string{"gc", "--stage-dir", stages, "--grace", "0s", "--stage", prefix})
	if code != 0 || !strings.Contains(out, "removed "+victim) || !strings.Contains(out, "removed 1 stages") {
		t.Errorf("gc --stage: exit %d:\n%s", code, out)
	}
	out, _, _ = runContract(t, bin, []string{"ls", "--stage-dir", stages})
	if !strings.Contains(out, "1 stages") || !strings.Contains(out, img) || strings.Contains(out, victim[:19]) {
		t.Errorf("ls after gc --stage:\n%s", out)
	}
	out, _, code = runContract(t, bin, []string{"gc", "--stage-dir", stages, "--older-than", "1h", "--grace", "0s"})
	if code != 0 || !strings.Contains(out, "within --older-than 1h0m0s") {
		t.Errorf("gc --older-than: exit %d, no reason given for the stage kept:\n%s", code, out)
	}
}

// TestMissingImageInAJobIsAUsageErrorOnEveryRank: inside a job the ranks
// after the first learn of the missing image from the rank that staged;
// they exit as it did (2, one line), not 1.
func TestMissingImageInAJobIsAUsageErrorOnEveryRank(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.dlimg")
	for rank := range 2 {
		cmd := exec.Command(bin, "exec", "--stage-dir", filepath.Join(dir, "stages"), missing, "--", "/bin/true")
		cmd.Env = append(clitest.CleanEnv(t.TempDir()), "SLURM_JOB_ID=4242")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		if code := cmd.ProcessState.ExitCode(); code != 2 || strings.Count(stderr.String(), "\n") != 1 ||
			!strings.HasPrefix(stderr.String(), "dlbundle exec: no image "+missing) {
			t.Errorf("rank %d of a job with a missing image: exit %d, %q; want 2 and one line", rank, code, stderr.String())
		}
	}
}

// TestVersionQueryAsKong: main answers the version spellings without kong
// (isVersionQuery); kong must print the same for each, and anything more on
// the line is left to kong.
func TestVersionQueryAsKong(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-v"}} {
		if !isVersionQuery(args) {
			t.Errorf("isVersionQuery(%q) = false", args)
		}
		var out bytes.Buffer
		p, err := newParser(args, kong.Writers(&out, &out), kong.Exit(func(int) { panic(kongExited{}) }))
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if r := recover(); r != nil && r != (kongExited{}) {
					panic(r)
				}
			}()
			ctx, err := parse(p, args)
			if err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			if err := ctx.Run(); err != nil {
				t.Fatalf("%q: %v", args, err)
			}
		}()
		if want := version.Version + "\n"; out.String() != want {
			t.Errorf("kong prints %q for %q, main's quick answer %q", out.String(), args, want)
		}
	}
	for _, args := range [][]string{{"--version", "x"}, {"exec", "--version"}, {"-vq"}, {}} {
		if isVersionQuery(args) {
			t.Errorf("isVersionQuery(%q) = true: kong's to answer", args)
		}
	}
}
