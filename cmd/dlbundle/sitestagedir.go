package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// slurmSiteStageDir is the stage_dir= a site gave the Slurm plugin in
// plugstack.conf (or a file it includes), "" when none: the plugin stages
// there, so the records of the steps it served are there too, and a user
// who runs `dlbundle report` after a job should not have to know the
// admin's setting. Read as the caller, only to choose where the caller's
// own report looks; the stage dir found is then checked like any other.
func slurmSiteStageDir() string {
	conf := os.Getenv("SLURM_CONF")
	if conf == "" {
		conf = "/etc/slurm/slurm.conf"
	}
	plugstack := filepath.Join(filepath.Dir(conf), "plugstack.conf")
	if v := confValue(conf, "PlugStackConfig"); v != "" {
		plugstack = v
	}
	return plugstackStageDir(plugstack, 0)
}

// confValue is the value of key in a slurm.conf-style file (Key=value,
// keys case-insensitive, # comments), "" when absent or unreadable.
func confValue(path, key string) string {
	val := ""
	eachLine(path, func(line string) {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), key) {
			val = strings.TrimSpace(v)
		}
	})
	return val
}

// plugstackStageDir reads a plugstack.conf: the stage_dir= argument of the
// dlbundle plugin's line, following `include` globs a few levels deep.
func plugstackStageDir(path string, depth int) string {
	dir := ""
	eachLine(path, func(line string) {
		f := strings.Fields(line)
		switch {
		case dir != "" || len(f) < 2:
		case f[0] == "include" && depth < 4:
			pattern := f[1]
			if !filepath.IsAbs(pattern) {
				pattern = filepath.Join(filepath.Dir(path), pattern)
			}
			matches, _ := filepath.Glob(pattern)
			for _, m := range matches {
				if dir == "" {
					dir = plugstackStageDir(m, depth+1)
				}
			}
		case (f[0] == "required" || f[0] == "optional") && filepath.Base(f[1]) == "spank_dlbundle.so":
			for _, a := range f[2:] {
				if v, ok := strings.CutPrefix(a, "stage_dir="); ok {
					dir = v
				}
			}
		}
	})
	return dir
}

// eachLine calls fn with each line of path without its # comment, trimmed;
// a missing or unreadable file has none. A configuration is small: at most
// 1 MiB is read.
func eachLine(path string, fn func(string)) {
	// O_NONBLOCK: a FIFO planted in an include glob's directory must not
	// hang the report; it is refused below as not a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return
	}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			fn(line)
		}
	}
}
