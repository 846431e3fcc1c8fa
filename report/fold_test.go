package report

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestFoldAdviceIsNeverShellTextFromUntrustedBytes: the image a run noted
// and the report names come from files another user may have planted. The
// fold command, run by a real POSIX shell, must hand build exactly those
// words and run nothing they hold; a word with control bytes gets no
// command at all, in the text or in --json's fold.
func TestFoldAdviceIsNeverShellTextFromUntrustedBytes(t *testing.T) {
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	hostile := []string{
		"$(touch " + pwned + ")/app.dlimg",
		"`touch " + pwned + "`.dlimg",
		"it's \"$HOME\" ${IFS}; touch " + pwned + " #",
		"-o",
		"",
	}
	for _, img := range hostile {
		s := Summarize([]ProcessReport{{PID: 1, Outside: []string{"/opt/x/lib.so"}}})
		s.Fold = &FoldAdvice{Image: img, Files: []string{"/r/a b.report", img}}
		fold := s.FoldCommand()
		if fold == "" {
			t.Fatalf("image %q: no fold command", img)
		}
		// The shell prints the words it would pass to dlbundle.
		out, err := exec.Command("sh", "-c", `set -- `+strings.TrimPrefix(fold, "dlbundle ")+`; for w; do printf '%s\0' "$w"; done`).Output()
		if err != nil {
			t.Fatalf("sh on %q: %v", fold, err)
		}
		if _, err := os.Stat(pwned); err == nil {
			t.Fatalf("the shell ran what image %q holds: fold = %s", img, fold)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if want := s.FoldArgv()[1:]; !reflect.DeepEqual(got, want) {
			t.Errorf("image %q: the shell got %q from %s, want %q", img, got, fold, want)
		}
	}
	s := Summarize([]ProcessReport{{PID: 1, Outside: []string{"/opt/x/lib.so"}}})
	s.Fold = &FoldAdvice{Image: "$(id>" + pwned + ";printf /home/victim/app.dlimg;: \x01)", Files: []string{"/r/run.report"}}
	if fold := s.FoldCommand(); fold != "" {
		t.Errorf("a word with a control byte got a fold command: %q", fold)
	}
	var buf bytes.Buffer
	if err := s.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	if text := buf.String(); strings.Contains(text, "dlbundle build") || !strings.Contains(text, "no command given") || strings.Contains(text, "\x01") {
		t.Errorf("text with a control byte in the image name:\n%s", text)
	}
	if argv := s.FoldArgv(); len(argv) == 0 || argv[3] != s.Fold.Image {
		t.Errorf("FoldArgv = %q, want the words unchanged (exec takes them as they are)", argv)
	}
}
