package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// envSquatChild runs TestSquattedDefaultStageDir's body in a mount namespace
// of its own, with a fresh tmpfs on /dev/shm (the host's /dev/shm is shared
// with everything else on the machine).
const envSquatChild = "DLBUNDLE_TEST_SQUAT_CHILD"

// Regression: any user can mkdir /dev/shm/dlbundle-<uid> for any uid;
// every exec of that user on the node then failed until reboot. Uid 1001
// takes /dev/shm/dlbundle-1002 and plants decoys where a fallback could be
// looked for (a directory of its own and a symlink to one it can write, both
// named like a fallback); four ranks of uid 1002 start at once. They must all
// run from one private stage dir (mode 0700, theirs, a name no one could
// predict), ignore the decoys, and say so exactly once, naming uid 1001; a
// second launch finds the same dir. Root's stage dir, squatted too, is no
// different.
func TestSquattedDefaultStageDir(t *testing.T) {
	needRoot(t)
	if os.Getenv(envSquatChild) == "" {
		p := clitest.NewProbeImage(t)
		makePublic(t, p.Work)
		publicCLI(t, p.Work)
		cmd := exec.Command(os.Args[0], "-test.run=^TestSquattedDefaultStageDir$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envSquatChild+"="+p.Work+":"+p.Original)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // Go makes / private first
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("in a mount namespace of its own: %v\n%s", err, out)
		}
		return
	}
	work, original, _ := strings.Cut(os.Getenv(envSquatChild), ":")
	if err := syscall.Mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777"); err != nil {
		t.Fatal(err)
	}
	cli := filepath.Join(work, "dlbundle")
	squatted := fmt.Sprintf("/dev/shm/dlbundle-%d", victimUID)
	decoyDir, decoyLink := squatted+".0000000000000000", squatted+".1111111111111111"
	for _, argv := range [][]string{
		{"/bin/mkdir", squatted},
		{"/bin/mkdir", "-m", "0700", decoyDir},
		{"/bin/mkdir", "-m", "0777", "/dev/shm/attacker"},
		{"/bin/ln", "-s", "/dev/shm/attacker", decoyLink},
		{"/bin/mkdir", "/dev/shm/dlbundle-0"}, // root's too
	} {
		if out, code := runAs(t, attackerUID, nil, argv...); code != 0 {
			t.Fatalf("%v as uid 1001: %s", argv, out)
		}
	}
	launch := func(uid uint32, step string, ranks int) (warnings int) {
		var wg sync.WaitGroup
		outs := make([]string, ranks)
		codes := make([]int, ranks)
		for i := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				env := append(clitest.CleanEnv(work), "SLURM_JOB_ID=41", "SLURM_STEP_ID="+step)
				outs[i], codes[i] = runAs(t, uid, env, cli, "exec", filepath.Join(work, "probe.dlimg"), "--", original)
			}()
		}
		wg.Wait()
		for i := range ranks {
			if codes[i] != 0 || !strings.Contains(outs[i], "exe="+original) {
				t.Errorf("step %s rank %d: exit %d, want the app run from the stage:\n%s", step, i, codes[i], outs[i])
			}
			warnings += strings.Count(outs[i], "warning:")
			if strings.Contains(outs[i], "warning:") && !strings.Contains(outs[i], "uid 1001") {
				t.Errorf("the warning does not name the squatter, uid 1001: %s", outs[i])
			}
		}
		return warnings
	}
	if n := launch(victimUID, "0", 4); n != 1 {
		t.Errorf("4 ranks of one launch printed %d warnings about the squatted stage dir; want 1", n)
	}
	fallbacks := func() []string {
		var fs []string
		ents, _ := os.ReadDir("/dev/shm")
		for _, e := range ents {
			var st unix.Stat_t
			n := filepath.Join("/dev/shm", e.Name())
			if strings.HasPrefix(n, squatted+".") && n != decoyDir && n != decoyLink && !strings.HasPrefix(n, squatted+".2000000000") {
				if unix.Lstat(n, &st) != nil || st.Uid != victimUID || st.Mode&0o7777 != 0o700 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
					t.Errorf("%s: uid %d mode %o; want uid 1002's directory of mode 0700", n, st.Uid, st.Mode)
				}
				fs = append(fs, n)
			}
		}
		return fs
	}
	first := fallbacks()
	if len(first) != 1 {
		t.Fatalf("fallback stage dirs %v; want exactly one for the 4 ranks", first)
	}
	if m, _ := filepath.Glob(first[0] + "/sha256-*"); len(m) != 1 {
		t.Errorf("the fallback holds stages %v; want 1", m)
	}
	for _, d := range []string{decoyDir, "/dev/shm/attacker"} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("the victim wrote into the attacker's %s: %v", d, ents)
		}
	}
	// 20,000 more decoys (200,000 made every exec take 0.6-0.8 s: the
	// fallback was found by scanning /dev/shm and fstatat-ing each): the
	// next exec finds the fallback without reading /dev/shm at all.
	// (named .2000000000..., which fallbacks() above leaves out)
	decoys := fmt.Sprintf("import os\nfor i in range(20000): os.mkdir('%s.%%016x' %% (0x2000000000000000 + i), 0o700)", squatted)
	if out, code := runAs(t, attackerUID, nil, "/usr/bin/python3", "-c", decoys); code != 0 {
		t.Fatalf("decoys: %s", out)
	}
	outDir := filepath.Join(work, "victim-out")
	if err := os.Mkdir(outDir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(outDir, victimUID, victimUID)
	straced := filepath.Join(outDir, "squat.strace")
	out, code := runAs(t, victimUID, append(clitest.CleanEnv(work), "SLURM_JOB_ID=41", "SLURM_STEP_ID=9"),
		"/usr/bin/strace", "-f", "-qq", "-e", "trace=getdents64,newfstatat,openat", "-o", straced, cli, "exec", filepath.Join(work, "probe.dlimg"), "--", original)
	if code != 0 || !strings.Contains(out, "exe="+original) {
		t.Fatalf("exec among 20,000 decoys: exit %d\n%s", code, out)
	}
	trace, _ := os.ReadFile(straced)
	listed := 0 // directory entries the exec read: /dev/shm holds over 20,000
	for _, l := range strings.Split(string(trace), "\n") {
		var n int
		if i := strings.Index(l, "/* "); strings.Contains(l, "getdents64(") && i >= 0 {
			fmt.Sscan(l[i+3:], &n)
		}
		listed += n
	}
	if listed > 1000 {
		t.Errorf("an exec among 20,000 decoys read %d directory entries; want /dev/shm never listed", listed)
	}
	if n := strings.Count(string(trace), fmt.Sprintf("dlbundle-%d.2000000000", victimUID)); n != 0 {
		t.Errorf("an exec among 20,000 decoys looked at %d of them; want none", n)
	}
	if n := launch(victimUID, "1", 2); n != 1 {
		t.Errorf("the second launch printed %d warnings; want 1", n)
	}
	if again := fallbacks(); len(again) != 1 || again[0] != first[0] {
		t.Errorf("the second launch used %v; want the first one's %s", again, first[0])
	}
	if n := launch(0, "2", 2); n != 1 {
		t.Errorf("root's launch in its squatted stage dir printed %d warnings; want 1", n)
	}
}
