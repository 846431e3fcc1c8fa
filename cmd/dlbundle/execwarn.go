package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/loader"
	"github.com/dlbundle/dlbundle/node"
	"github.com/dlbundle/dlbundle/trace"
)

// warnBeforeStart says, before the app starts, what would otherwise go
// unnoticed: the command is not in the image (it and what it loads come from
// the file system), or the stage went somewhere else than where stages
// normally go (a read-only /dev/shm: the stage is on a disk). Each is said
// once per launch: by the process that built the stage, or by rank 0 (or a
// lone exec) when the stage was there already.
func warnBeforeStart(stageDirFlag, imageRef string, staged *node.Staged, argv []string) {
	rank := trace.LauncherRank(os.Getenv)
	if !staged.Materialized && rank != "" && rank != "0" {
		return
	}
	if len(argv) > 0 && !commandInImage(staged.Dir, argv[0]) {
		fmt.Fprintf(os.Stderr, "dlbundle exec: warning: %s is not in %s: it runs from the file system, and what it loads that the image lacks is looked up there by every process; build the image from a pilot of this command (dlbundle trace -- %s ...)\n",
			argv[0], imageRef, argv[0])
	}
	if staged.Materialized && stageDirFlag == "" && os.Getenv(node.StageDirEnv) == "" &&
		!strings.HasPrefix(staged.Dir, "/dev/shm/") {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			fmt.Fprintf(os.Stderr, "dlbundle exec: warning: /dev/shm is not a writable tmpfs here (read-only, or another file system): staged into %s instead; choose with --stage-dir DIR (or %s)\n",
				filepath.Dir(staged.Dir), node.StageDirEnv)
		}
	}
}

// commandInImage reports whether cmd, as exec resolves it (a path, or a
// bare name along PATH), is a file or #! script the image holds.
func commandInImage(stage, cmd string) bool {
	held := func(p string) bool {
		abs, err := abspath.Abs(p)
		if err != nil {
			return false
		}
		if _, ok := loader.StagedPath(stage, abs); ok {
			return true
		}
		_, _, ok := loader.StagedScript(stage, abs)
		return ok
	}
	if strings.Contains(cmd, "/") {
		return held(cmd)
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		if held(filepath.Join(dir, cmd)) {
			return true
		}
	}
	return false
}
