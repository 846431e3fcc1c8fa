package node

import (
	"os"
	"os/user"
	"strconv"
	"strings"
)

// ExpandStageDir expands the patterns of a --stage-dir / DLBUNDLE_STAGE_DIR
// value, so that one setting in a module file serves every user, job and
// node:
//
//	%u  user name (uid if it has none)   %U  uid
//	%j  batch job id (SLURM_JOB_ID, PBS_JOBID, ...; "nojob" outside a job)
//	%n  node name (SLURMD_NODENAME, else the short host name)
//	%h  host name                        %t  $TMPDIR (the job's, e.g. a per-job tmpfs), else /tmp
//	%%  a literal %
//
// Any other %X is left as it is. Values from the environment cannot add a
// path component: '/' in them becomes '_'.
func ExpandStageDir(pattern string, getenv func(string) string) string {
	return expandStageDirFor(pattern, getenv, os.Getuid())
}

// expandStageDirFor is ExpandStageDir for the user uid (root staging for a
// job's user expands %u and %U to that user).
func expandStageDirFor(pattern string, getenv func(string) string, uid int) string {
	if !strings.Contains(pattern, "%") {
		return pattern
	}
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c != '%' || i+1 == len(pattern) {
			b.WriteByte(c)
			continue
		}
		i++
		switch pattern[i] {
		case '%':
			b.WriteByte('%')
		case 'u':
			name := strconv.Itoa(uid)
			if u, err := user.LookupId(name); err == nil {
				name = u.Username
			}
			b.WriteString(component(name))
		case 'U':
			b.WriteString(strconv.Itoa(uid))
		case 'j':
			job := BatchJobID(getenv)
			if job == "" {
				job = "nojob"
			}
			b.WriteString(component(job))
		case 'n':
			node := getenv("SLURMD_NODENAME")
			if node == "" {
				node, _, _ = strings.Cut(hostname(), ".")
			}
			b.WriteString(component(node))
		case 'h':
			b.WriteString(component(hostname()))
		case 't':
			tmp := getenv("TMPDIR")
			if tmp == "" {
				tmp = "/tmp"
			}
			b.WriteString(tmp) // a directory, slashes and all
		default:
			b.WriteByte('%')
			b.WriteByte(pattern[i])
		}
	}
	return b.String()
}

// component makes an environment value one path component.
func component(s string) string {
	s = strings.ReplaceAll(s, "/", "_")
	if s == "" || s == "." || s == ".." {
		return "_"
	}
	return s
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}
