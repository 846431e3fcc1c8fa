// Command clibench measures what the dlbundle command itself costs before
// the app runs (`make bench-cli`), against the goals its report states:
//
//   - exec's fixed cost on a warm stage: `dlbundle exec IMG -- /bin/true`
//     against `/bin/true`, with an empty static Go program as the floor any
//     Go binary pays, a static Go program that only execs /bin/true as the
//     floor any launcher written in Go pays, `dlbundle --version` (runtime, package
//     initializers and kong, no staging), a static C program that only
//     execs /bin/true as the floor of any launcher at all (a process that
//     execs the app pays a second execve), and /bin/true run directly in the
//     environment exec gives it, which splits exec's cost into dlbundle's
//     own process and the shim's in the app; /bin/true started with the
//     variables `dlbundle env` prints (the launcher-less path: no dlbundle
//     process at all), and its staged copy started by path with them (what
//     the Slurm plugin has slurmstepd exec);
//   - what 100,000 arguments add to exec and to trace, beyond what they add
//     to exec'ing /bin/true directly (the kernel copies them either way).
//
// Every command runs in interleaved rounds (one run of each per round, in
// an order drawn afresh each round), so that the machine's load hits them
// alike and no command always follows the same one: a run is faster after
// one that touched the same files (measured: a shim process right after
// another one, 0.1 ms), so a fixed order favours some rows over others.
// The figures are medians of wall
// time, with the CPU time and minor page faults the kernel accounts to each
// run (getrusage of the child). It writes a markdown report.
//
//	go run ./internal/clibench -dlbundle bin/dlbundle -out docs/bench/cli.md
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlbundle/dlbundle/internal/benchhost"
)

// sample is one run of one command.
type sample struct {
	wall, cpu time.Duration
	minflt    int64
}

// stats are the medians of a command's samples.
type stats struct {
	name            string
	wall, cpu       time.Duration
	minflt          int64
	runs            int
	argv            []string
	env             []string // nil: this process's
	samples         []sample
	nonZeroExitSeen bool
}

func main() {
	bin := flag.String("dlbundle", "bin/dlbundle", "the dlbundle binary to measure")
	out := flag.String("out", "docs/bench/cli.md", "report to write")
	rounds := flag.Int("rounds", 300, "rounds of the short commands")
	longRounds := flag.Int("long-rounds", 15, "rounds of the 100,000-argument commands")
	compare := flag.String("compare", "", "another dlbundle binary (e.g. an older build) to run in the same rounds, short commands only")
	pairs := flag.Int("pairs", 1000, "alternating pairs (native, served) of the launcher-less path and of the empty audit+preload")
	flag.Parse()
	if err := run(*bin, *compare, *out, *rounds, *longRounds, *pairs); err != nil {
		fmt.Fprintln(os.Stderr, "clibench:", err)
		os.Exit(1)
	}
}

func run(bin, compare, out string, rounds, longRounds, pairs int) error {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "clibench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	stage := filepath.Join(dir, "stage")
	img := filepath.Join(dir, "true.dlimg")
	empty := filepath.Join(dir, "empty")
	src := filepath.Join(dir, "empty.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		return err
	}
	// The floor of any launcher written in Go: a static program that does
	// nothing but exec its arguments.
	goexec := filepath.Join(dir, "goexec")
	goexecSrc := filepath.Join(dir, "goexec.go")
	if err := os.WriteFile(goexecSrc, []byte("package main\n\nimport (\n\t\"os\"\n\t\"syscall\"\n)\n\n"+
		"func main() { syscall.Exec(os.Args[1], os.Args[1:], os.Environ()) }\n"), 0o644); err != nil {
		return err
	}
	// The floor of any launcher, whatever its language: a static C program
	// that does nothing but exec its arguments (no runtime, one thread).
	cexec := filepath.Join(dir, "cexec")
	cexecSrc := filepath.Join(dir, "cexec.c")
	if err := os.WriteFile(cexecSrc, []byte("#include <unistd.h>\n"+
		"int main(int argc, char **argv) { (void)argc; execv(argv[1], argv + 1); return 127; }\n"), 0o644); err != nil {
		return err
	}
	// The floor of any LD_AUDIT+LD_PRELOAD shim: an audit module that only
	// answers la_version and a preload with nothing in it; ld.so's own cost
	// of loading the two (open, map, relocate, the audit interface's calls).
	emptyAudit, emptyPreload := filepath.Join(dir, "emptyaudit.so"), filepath.Join(dir, "emptypreload.so")
	emptyAuditSrc, emptyPreloadSrc := filepath.Join(dir, "emptyaudit.c"), filepath.Join(dir, "emptypreload.c")
	if err := os.WriteFile(emptyAuditSrc, []byte("#define _GNU_SOURCE\n#include <link.h>\nunsigned la_version(unsigned v) { (void)v; return LAV_CURRENT; }\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(emptyPreloadSrc, []byte("int dlbundle_clibench_empty;\n"), 0o644); err != nil {
		return err
	}
	setup := [][]string{
		{"cc", "-O2", "-shared", "-fPIC", "-o", emptyAudit, emptyAuditSrc},
		{"cc", "-O2", "-shared", "-fPIC", "-o", emptyPreload, emptyPreloadSrc},
		{"cc", "-O2", "-static", "-o", cexec, cexecSrc},
		{"go", "build", "-trimpath", "-ldflags=-s -w", "-o", empty, src},
		{"go", "build", "-trimpath", "-ldflags=-s -w", "-o", goexec, goexecSrc},
		{bin, "trace", "-q", "-o", filepath.Join(dir, "true.trace"), "--", "/bin/true"},
		{bin, "build", "-o", img, filepath.Join(dir, "true.trace")},
		{bin, "exec", "--stage-dir", stage, img, "--", "/bin/true"}, // stage it: the runs are warm
	}
	for _, c := range setup {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(c, " "), err, o)
		}
	}
	// The environment exec gives the app (the shim's variables): /bin/true
	// run directly with it is the app's share of exec's cost, the rest is
	// dlbundle's own process.
	envOut, err := exec.Command(bin, "exec", "--stage-dir", stage, img, "--", "/usr/bin/env", "-0").Output()
	if err != nil {
		return fmt.Errorf("dlbundle exec -- env: %v", err)
	}
	shimEnv := strings.Split(strings.TrimSuffix(string(envOut), "\x00"), "\x00")
	// The launcher-less path: the variables `dlbundle env` prints, given to
	// /bin/true by its launcher (eval in a shell, mpirun -x, the Flux
	// plugin), and the staged copy started by its path with them (what the
	// Slurm plugin has slurmstepd exec).
	envEnv, staged, err := launcherlessEnv(bin, stage, img)
	if err != nil {
		return err
	}
	many := make([]string, 100_000)
	for i := range many {
		many[i] = strconv.Itoa(i + 1)
	}
	execArgs := []string{bin, "exec", "--stage-dir", stage, img, "--", "/bin/true"}
	traceArgs := []string{bin, "trace", "-q", "-o", filepath.Join(dir, "t.trace"), "--", "/bin/true"}
	short := []*stats{
		{name: "/bin/true", argv: []string{"/bin/true"}},
		{name: "empty static Go program", argv: []string{empty}},
		{name: "dlbundle --version", argv: []string{bin, "--version"}},
		{name: "dlbundle exec IMG -- /bin/true (warm)", argv: execArgs},
		{name: "/bin/true in the environment exec gives it (the shim loaded, no dlbundle)", argv: []string{"/bin/true"}, env: shimEnv},
		{name: "a static Go program that only execs /bin/true", argv: []string{goexec, "/bin/true"}},
		{name: "a static C program that only execs /bin/true", argv: []string{cexec, "/bin/true"}},
		{name: "/bin/true started with dlbundle env's variables (launcher-less: eval, mpirun -x, Flux)", argv: []string{"/bin/true"}, env: envEnv},
		{name: "the staged /bin/true started by its path with env's variables (srun --dlbundle)", argv: []string{staged}, env: envEnv},
	}
	var compareEnv []string // the other build's launcher-less variables, when it prints them
	if compare != "" {
		// The other binary's exec and shim from a stage of its own: the
		// same stage dir would hand it this binary's stage (its table and
		// shim objects), which it may not even read (fd3426b and b8a1fe2
		// stopped with a panic on a first draft of table version 3).
		cstage := stage + "-compare"
		short = append(short,
			&stats{name: "compare: " + compare + " --version", argv: []string{compare, "--version"}},
			&stats{name: "compare: " + compare + " exec IMG -- /bin/true (warm)", argv: []string{compare, "exec", "--stage-dir", cstage, img, "--", "/bin/true"}})
		if o, err := exec.Command(compare, "exec", "--stage-dir", cstage, img, "--", "/bin/true").CombinedOutput(); err != nil {
			return fmt.Errorf("%s exec: %v\n%s", compare, err, o)
		}
		// An older build may print its variables in no format this reads
		// (fd3426b's env has no env0): then its launcher-less row is left out.
		if cenv, _, err := launcherlessEnv(compare, cstage, img); err != nil {
			fmt.Fprintf(os.Stderr, "clibench: %s: %v; its launcher-less row is left out\n", compare, err)
		} else {
			short = append(short, &stats{name: "compare: /bin/true started with " + compare + " env's variables", argv: []string{"/bin/true"}, env: cenv})
			compareEnv = cenv
		}
	}
	long := []*stats{
		{name: "/bin/true + 100,000 args", argv: append([]string{"/bin/true"}, many...)},
		{name: "dlbundle exec (warm) -- /bin/true", argv: execArgs},
		{name: "dlbundle exec (warm) -- /bin/true + 100,000 args", argv: append(slices.Clone(execArgs), many...)},
		{name: "dlbundle trace -- /bin/true", argv: traceArgs},
		{name: "dlbundle trace -- /bin/true + 100,000 args", argv: append(slices.Clone(traceArgs), many...)},
		{name: "/bin/true", argv: []string{"/bin/true"}},
	}
	// The launcher-less path against native in alternating pairs, and the
	// empty audit+preload against native in the same rounds: the share's
	// cost is the median of the pairs' differences, which a load that
	// changes over the run shifts less than a difference of medians.
	emptyEnv := append(os.Environ(), "LD_AUDIT="+emptyAudit, "LD_PRELOAD="+emptyPreload)
	paired := []*pairStats{
		{name: "/bin/true with dlbundle env's variables minus /bin/true", served: &stats{argv: []string{"/bin/true"}, env: envEnv}},
		{name: "/bin/true with an empty LD_AUDIT module and an empty LD_PRELOAD minus /bin/true", served: &stats{argv: []string{"/bin/true"}, env: emptyEnv}},
	}
	// The other build's shim in the same pairs: before and after, with the
	// empty pair beside both.
	if compareEnv != nil {
		paired = append(paired, &pairStats{name: "/bin/true with " + compare + " env's variables minus /bin/true", served: &stats{argv: []string{"/bin/true"}, env: compareEnv}})
	}
	start := time.Now()
	load0 := benchhost.LoadAvg()
	measure(short, rounds)
	measure(long, longRounds)
	measurePairs(paired, pairs)
	load1 := benchhost.LoadAvg()

	trueS, emptyS, version, warm, shimmed, goexecS, cexecS := short[0], short[1], short[2], short[3], short[4], short[5], short[6]
	envS, stagedS := short[7], short[8]
	fixed := warm.wall - trueS.wall
	floor := emptyS.wall - trueS.wall
	execAdds := (long[2].wall - long[1].wall) - (long[0].wall - long[5].wall)
	traceAdds := (long[4].wall - long[3].wall) - (long[0].wall - long[5].wall)
	execAddsCPU := (long[2].cpu - long[1].cpu) - (long[0].cpu - long[5].cpu)
	traceAddsCPU := (long[4].cpu - long[3].cpu) - (long[0].cpu - long[5].cpu)

	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# dlbundle's own cost: exec's fixed cost, long command lines\n\n")
	fmt.Fprintf(&b, "`make bench-cli` (internal/clibench), %s, %s (%s), %d CPUs, load average %s at the start, %s at the end; %s in all.\n\n",
		start.UTC().Format("2006-01-02 15:04 UTC"), host, runtime.GOARCH, runtime.NumCPU(), load0, load1, time.Since(start).Round(time.Second))
	fmt.Fprintf(&b, "Each command ran in interleaved rounds (one run of each per round, in an order drawn afresh each round: %d rounds of the short ones, %d of the long ones); medians of wall time, and of the CPU time and minor page faults getrusage accounts to the child.\n\n", rounds, longRounds)
	fmt.Fprintf(&b, "| goal | figure | met |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| exec's fixed cost on a warm stage <= 1 ms over exec'ing the app directly | %s wall, %s CPU (exec %s vs /bin/true %s); an empty static Go program alone costs %s wall, %s CPU over /bin/true | %s |\n",
		ms(fixed), ms(warm.cpu-trueS.cpu), ms(warm.wall), ms(trueS.wall), ms(floor), ms(emptyS.cpu-trueS.cpu), met(fixed <= time.Millisecond))
	// A launcher's floor: what it costs over /bin/true, alone and with the
	// shim's share in the app.
	floorRow := func(what string, s *stats) {
		fmt.Fprintf(&b, "| %s; with the shim's share (below) | %s wall, %s CPU, %d minor faults; %s wall with the shim | |\n",
			what, ms(s.wall-trueS.wall), ms(s.cpu-trueS.cpu), s.minflt-trueS.minflt, ms(s.wall-trueS.wall+shimmed.wall-trueS.wall))
	}
	floorRow("the floor of any launcher: a static C program that only execs /bin/true, over /bin/true (the second execve)", cexecS)
	floorRow("the floor of a Go launcher: a static Go program that only execs /bin/true, over /bin/true", goexecS)
	fmt.Fprintf(&b, "| of which above that floor (exec minus the Go launcher, minus the shim's share) | %s wall, %s CPU, %d minor faults | |\n",
		ms(warm.wall-goexecS.wall-(shimmed.wall-trueS.wall)), ms(warm.cpu-goexecS.cpu-(shimmed.cpu-trueS.cpu)), warm.minflt-goexecS.minflt-(shimmed.minflt-trueS.minflt))
	fmt.Fprintf(&b, "| of which dlbundle's own process (exec minus /bin/true run directly in the environment exec gives it) | %s wall, %s CPU, %d of %d minor faults | |\n",
		ms(warm.wall-shimmed.wall), ms(warm.cpu-shimmed.cpu), warm.minflt-shimmed.minflt, warm.minflt-trueS.minflt)
	fmt.Fprintf(&b, "| of which the shim in the app (/bin/true in exec's environment minus /bin/true) | %s wall, %s CPU, %d minor faults | |\n",
		ms(shimmed.wall-trueS.wall), ms(shimmed.cpu-trueS.cpu), shimmed.minflt-trueS.minflt)
	fmt.Fprintf(&b, "| per-rank cost of the launcher-less path (dlbundle env's variables, no launcher process) <= 0.3 ms over native | %s wall, %s CPU, %d minor faults over /bin/true; exec's %s | %s |\n",
		ms(envS.wall-trueS.wall), ms(envS.cpu-trueS.cpu), envS.minflt-trueS.minflt, ms(fixed), met(envS.wall-trueS.wall <= 300*time.Microsecond))
	fmt.Fprintf(&b, "| the launcher-less path <= 0.15 ms over native, median of %d alternating pairs (native, served) | %s wall, %d minor faults (%s, %d faults for the empty audit+preload pair in the same rounds: %s of the share is ours) | %s |\n",
		paired[0].n, ms(paired[0].diff), paired[0].minflt, ms(paired[1].diff), paired[1].minflt, ms(paired[0].diff-paired[1].diff), met(paired[0].diff <= 150*time.Microsecond))
	if len(paired) > 2 {
		fmt.Fprintf(&b, "| the same with %s's shim, in the same pairs | %s wall, %d minor faults (%s above the empty pair) | |\n",
			compare, ms(paired[2].diff), paired[2].minflt, ms(paired[2].diff-paired[1].diff))
	}
	fmt.Fprintf(&b, "| the same, the staged copy started by its path (srun --dlbundle) | %s wall, %s CPU, %d minor faults over /bin/true | %s |\n",
		ms(stagedS.wall-trueS.wall), ms(stagedS.cpu-trueS.cpu), stagedS.minflt-trueS.minflt, met(stagedS.wall-trueS.wall <= 300*time.Microsecond))
	fmt.Fprintf(&b, "| 100,000 arguments add <= 50 ms to exec (goal 4) | %s wall, %s CPU | %s |\n", ms(execAdds), ms(execAddsCPU), met(execAdds <= 50*time.Millisecond))
	fmt.Fprintf(&b, "| 100,000 arguments add <= 50 ms to trace (goal 4) | %s wall, %s CPU | %s |\n\n", ms(traceAdds), ms(traceAddsCPU), met(traceAdds <= 50*time.Millisecond))
	fmt.Fprintf(&b, "100,000 arguments: what they add to dlbundle beyond what they add to exec'ing /bin/true directly (%s), i.e. (with − without) of dlbundle minus (with − without) of /bin/true.\n\n", ms(long[0].wall-long[5].wall))
	fmt.Fprintf(&b, "| command | runs | wall (median) | CPU (median) | minor faults (median) |\n|---|---|---|---|---|\n")
	for _, s := range append(short, long...) {
		name := s.name
		if s.nonZeroExitSeen { // its time is a failure's, not the command's
			name += " **(exited with an error: not a measurement of the command)**"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d |\n", name, s.runs, ms(s.wall), ms(s.cpu), s.minflt)
	}
	if compare != "" {
		cv, ce := short[9], short[10]
		fmt.Fprintf(&b, "\n| no verb starts slower than %s (same rounds) | this build | %s | met |\n|---|---|---|---|\n", compare, compare)
		fmt.Fprintf(&b, "| dlbundle --version | %s | %s | %s |\n", ms(version.wall), ms(cv.wall), met(version.wall <= cv.wall))
		fmt.Fprintf(&b, "| dlbundle exec IMG -- /bin/true (warm) | %s | %s | %s |\n", ms(warm.wall), ms(ce.wall), met(warm.wall <= ce.wall))
	}
	fmt.Fprintf(&b, "\n`dlbundle --version` is the runtime and every package initializer, with no staging and no kong: %s over the empty Go program, %d minor faults against %d.\n",
		ms(version.wall-emptyS.wall), version.minflt, emptyS.minflt)
	fmt.Print(b.String())
	// The analysis written by hand below the marker survives a new run.
	if old, err := os.ReadFile(out); err == nil {
		if i := strings.Index(string(old), notesMarker); i >= 0 {
			b.WriteString("\n" + string(old[i:]))
		}
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// launcherlessEnv returns this process's environment with the variables
// `dlbundle env` prints for the image (its env0 format applied), and the
// path of /bin/true's staged copy.
func launcherlessEnv(bin, stage, img string) (env []string, staged string, err error) {
	out, err := exec.Command(bin, "env", "--format=env0", "--stage-dir", stage, img).Output()
	if err != nil {
		return nil, "", fmt.Errorf("dlbundle env: %v", err)
	}
	set := map[string]string{}
	var order []string
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, "", fmt.Errorf("dlbundle env printed %q: the benchmark expects only variables to set", kv)
		}
		set[k] = v
		order = append(order, k)
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; !ours {
			env = append(env, kv)
		}
	}
	for _, k := range order {
		env = append(env, k+"="+set[k])
	}
	if set["DLBUNDLE_STAGE"] == "" {
		return nil, "", fmt.Errorf("dlbundle env set no DLBUNDLE_STAGE")
	}
	staged = filepath.Join(set["DLBUNDLE_STAGE"], "root", "bin", "true")
	if _, err := os.Stat(staged); err != nil {
		return nil, "", fmt.Errorf("the stage holds no /bin/true: %v", err)
	}
	return env, staged, nil
}

// notesMarker starts the hand-written part of the report, which a new run
// keeps.
const notesMarker = "<!-- notes: kept by clibench -->"

// measure runs every command once per round, rounds times, and sets their
// medians.
func measure(cmds []*stats, rounds int) {
	rng := rand.New(rand.NewPCG(1, 2)) // the same orders in every run of the benchmark
	for range rounds {
		for _, i := range rng.Perm(len(cmds)) {
			s := cmds[i]
			s.samples = append(s.samples, runOnce(s))
		}
	}
	for _, s := range cmds {
		s.runs = len(s.samples)
		s.wall = median(s.samples, func(x sample) int64 { return int64(x.wall) })
		s.cpu = median(s.samples, func(x sample) int64 { return int64(x.cpu) })
		s.minflt = int64(median(s.samples, func(x sample) int64 { return x.minflt }))
	}
}

// pairStats is a served command against /bin/true run natively, in
// alternating pairs (which of the two runs first alternates too).
type pairStats struct {
	name   string
	served *stats
	n      int
	diff   time.Duration // median of served minus native over the pairs
	minflt int64         // the same for minor page faults
}

func measurePairs(ps []*pairStats, pairs int) {
	native := &stats{argv: []string{"/bin/true"}}
	diffs, faults := make([][]int64, len(ps)), make([][]int64, len(ps))
	for i := range pairs {
		for j, p := range ps {
			var a, b sample
			if i%2 == 0 {
				a, b = runOnce(native), runOnce(p.served)
			} else {
				b, a = runOnce(p.served), runOnce(native)
			}
			diffs[j] = append(diffs[j], int64(b.wall-a.wall))
			faults[j] = append(faults[j], b.minflt-a.minflt)
		}
	}
	for j, p := range ps {
		p.n = pairs
		p.diff = median(diffs[j], func(x int64) int64 { return x })
		p.minflt = int64(median(faults[j], func(x int64) int64 { return x }))
	}
}

func runOnce(s *stats) sample {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env = s.env
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if err != nil && !s.nonZeroExitSeen {
		s.nonZeroExitSeen = true
		fmt.Fprintf(os.Stderr, "clibench: %s: %v\n", s.name, err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return sample{wall: wall, cpu: cpu, minflt: ru.Minflt}
}

func median[T any](xs []T, key func(T) int64) time.Duration {
	v := make([]int64, len(xs))
	for i, x := range xs {
		v[i] = key(x)
	}
	slices.Sort(v)
	return time.Duration(v[len(v)/2])
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
