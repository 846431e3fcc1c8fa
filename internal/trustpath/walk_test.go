package trustpath

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzWalkMatchesRule drives the walker with random trees of owners, modes
// and symbolic links (absolute, relative, with . and ..) and random paths,
// for root and two users, both rules, files and directories, and compares
// how each walk ends with the reference written from the rule (model_test.go).
func FuzzWalkMatchesRule(f *testing.F) {
	for seed := int64(0); seed < 64; seed++ {
		f.Add(seed, uint8(12), uint8(seed%5), uint8(seed%3), seed%3 == 0)
	}
	f.Fuzz(func(t *testing.T, seed int64, size, ruleN, who uint8, enterLast bool) {
		r := rand.New(rand.NewSource(seed))
		m := randomModel(r, int(size%24), true)
		rule := []Rule{Shared, Write, Private}[int(ruleN)%3]
		uid := modelUIDs[int(who)%len(modelUIDs)]
		for i := 0; i < 8; i++ {
			p := "/" + strings.TrimPrefix(randomPath(r, true), "/")
			want := refResolve(m, rule, uid, p, enterLast)
			got := walkOutcome(m, rule, uid, p, enterLast)
			if got != want {
				t.Fatalf("seed %d: walk %q as uid %d (rule %d, enterLast %v): walker %v, reference %v", seed, p, uid, rule, enterLast, got, want)
			}
		}
	})
}

// The same with Create (mkdir -p as the stage dir and extract's target
// use it): the walker makes missing directories in its model, the reference
// in a copy of it; the walks must end alike, in directories of the same path.
func FuzzWalkCreateMatchesRule(f *testing.F) {
	for seed := int64(0); seed < 32; seed++ {
		f.Add(seed, uint8(10), uint8(seed%3), uint8(seed%3))
	}
	f.Fuzz(func(t *testing.T, seed int64, size, ruleN, who uint8) {
		r := rand.New(rand.NewSource(seed))
		base := randomModel(r, int(size%24), true)
		rule := []Rule{Shared, Write, Private}[int(ruleN)%3]
		uid := modelUIDs[int(who)%len(modelUIDs)]
		for i := 0; i < 6; i++ {
			p := "/" + strings.TrimPrefix(randomPath(r, true), "/") + "/" + randomPath(r, false)
			ref, walked := base.clone(), base.clone()
			ref.uid, walked.uid = uid, uid
			want := refResolveCreate(ref, rule, uid, p, true, true)
			w := &Walker{Rule: rule, Uid: uid, Create: true, fs: modelFS{walked}}
			d, err := w.WalkDir(p)
			var got outcome
			var refusal *Error
			switch {
			case errors.As(err, &refusal):
				got.refused = true
			case err != nil:
				got.failed = true
			}
			if got.refused != want.refused || got.failed != want.failed {
				t.Fatalf("seed %d: mkdir -p %q as uid %d (rule %d): walker %v (%v), reference %v", seed, p, uid, rule, got, err, want)
			}
			if err == nil && walked.pathOf(modelID(d)) != ref.pathOf(want.dir) {
				t.Fatalf("seed %d: mkdir -p %q as uid %d (rule %d): walker ended in %s, reference in %s", seed, p, uid, rule, walked.pathOf(modelID(d)), ref.pathOf(want.dir))
			}
		}
	})
}

// The same comparison on the kernel's file system: random trees built for
// real below a private temporary directory (owners by lchown, modes by
// chmod), walked by the real walker (*at calls), compared with the
// reference on the model they were built from. The walker's caller is set
// to each uid; the test runs as root, so that permissions (which the rule
// does not look at) never stop a walk.
func TestWalkRealTreesMatchRule(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("builds trees of uids 1001 and 1002: needs root (make test runs as root)")
	}
	for seed := int64(0); seed < 40; seed++ {
		r := rand.New(rand.NewSource(seed))
		m := randomModel(r, 14, false)
		top := t.TempDir()
		build(t, m, 0, top, top)
		for i := 0; i < 12; i++ {
			q := strings.TrimPrefix(randomPath(r, false), "/")
			for _, uid := range modelUIDs {
				for _, rule := range []Rule{Shared, Write, Private} {
					for _, enterLast := range []bool{false, true} {
						want := refResolve(m, rule, uid, "/"+q, enterLast)
						got := realOutcome(t, m, top, rule, uid, top+"/"+q, enterLast)
						if got != want {
							t.Fatalf("seed %d: walk %s as uid %d (rule %d, enterLast %v): walker %v, reference %v", seed, q, uid, rule, enterLast, got, want)
						}
					}
				}
			}
		}
	}
}

// build makes model node id at path p, then its children.
func build(t *testing.T, m *model, id int, top, p string) {
	t.Helper()
	n := m.nodes[id]
	var err error
	switch n.kind {
	case unix.S_IFDIR:
		if id != 0 {
			err = os.Mkdir(p, 0o700)
		}
		for name, c := range n.children {
			defer build(t, m, c, top, filepath.Join(p, name))
		}
	case unix.S_IFREG:
		err = os.WriteFile(p, nil, 0o600)
	case unix.S_IFLNK:
		target := n.target
		if strings.HasPrefix(target, "/") { // the model's / is the tree's top
			target = top + target
		}
		err = os.Symlink(target, p)
	}
	if err == nil {
		err = os.Lchown(p, int(n.uid), int(n.uid))
	}
	if err == nil && n.kind != unix.S_IFLNK {
		err = unix.Chmod(p, n.perm)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func realOutcome(t *testing.T, m *model, top string, rule Rule, uid uint32, p string, enterLast bool) outcome {
	w := &Walker{Rule: rule, Uid: uid}
	var o outcome
	var dirPath string
	var err error
	if enterLast {
		var d *Dir
		if d, err = w.WalkDir(p); err == nil {
			dirPath = d.Path
			d.Close()
		}
	} else {
		var l *Last
		if l, err = w.Walk(p); err == nil {
			dirPath, o.name, o.exists = l.Dir.Path, l.Name, l.Exists
			l.Close()
		}
	}
	var refusal *Error
	switch {
	case errors.As(err, &refusal):
		return outcome{refused: true}
	case err != nil:
		return outcome{failed: true}
	}
	rel, ok := strings.CutPrefix(dirPath, top)
	if !ok {
		t.Fatalf("walk of %s ended in %s, outside the tree %s", p, dirPath, top)
	}
	if rel == "" {
		rel = "/"
	}
	o.dir = -1
	for id := range m.nodes {
		if m.nodes[id].kind == unix.S_IFDIR && m.pathOf(id) == rel {
			o.dir = id
		}
	}
	return o
}

// The attack the rule exists for: uid 1001
// makes /tmp/victim-jobs (mode 0755) and puts an image in it; the victim's
// `mkdir -p` succeeds on it. Neither the victim nor root may use anything
// below it, not even a file of the victim's own in it; their own directory
// there, root's, and another user's directory outside any world-writable
// directory are fine.
func TestRuleRefusesDirectoryAnotherUserMadeInTmp(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("plays uids 1001 and 1002: needs root")
	}
	top := t.TempDir()
	tmp := filepath.Join(top, "tmp")
	mk := func(p string, uid int, mode uint32) {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	file := func(p string, uid int) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	mk(tmp, 0, 0o1777)
	mk(filepath.Join(tmp, "victim-jobs"), 1001, 0o755)
	file(filepath.Join(tmp, "victim-jobs", "app.dlimg"), 1001)
	file(filepath.Join(tmp, "victim-jobs", "own.dlimg"), 1002)
	mk(filepath.Join(tmp, "mine"), 1002, 0o700)
	file(filepath.Join(tmp, "mine", "app.dlimg"), 1002)
	mk(filepath.Join(top, "colleague"), 1001, 0o755)
	file(filepath.Join(top, "colleague", "app.dlimg"), 1001)
	for _, c := range []struct {
		path    string
		uid     uint32
		refused bool
	}{
		{"tmp/victim-jobs/app.dlimg", 1002, true},
		{"tmp/victim-jobs/app.dlimg", 0, true},
		{"tmp/victim-jobs/own.dlimg", 1002, true},
		{"tmp/victim-jobs/app.dlimg", 1001, false},
		{"tmp/mine/app.dlimg", 1002, false},
		{"colleague/app.dlimg", 1002, false},
	} {
		for _, rule := range []Rule{Shared, Write, Private} {
			last, err := (&Walker{Rule: rule, Uid: c.uid}).Walk(filepath.Join(top, c.path))
			var refusal *Error
			switch {
			case c.refused && (!errors.As(err, &refusal) || !strings.Contains(err.Error(), "victim-jobs, owned by uid 1001 and lies in "+tmp)):
				t.Errorf("%s as uid %d: %v; want a refusal naming victim-jobs and its owner", c.path, c.uid, err)
			case !c.refused && rule == Shared && (err != nil || !last.Exists):
				t.Errorf("%s as uid %d: %v; want it found", c.path, c.uid, err)
			}
			if err == nil {
				last.Close()
			}
		}
	}
}
