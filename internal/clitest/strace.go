package clitest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// MPIHello is the MPI program the fold tests pilot at one rank and run at
// three: each rank prints "hello R of N".
const MPIHello = `#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
	int r, n;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &r);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	printf("hello %d of %d\n", r, n);
	MPI_Finalize();
	return 0;
}
`

// straceFileCall matches a file call in an strace log (`strace -e
// trace=%file`): its name and the path it was given.
var straceFileCall = regexp.MustCompile(`^\d+\s+(\w+)\((?:AT_FDCWD, |\d+, )?"([^"]+)"`)

// sharedObject matches the name of a shared object (libx.so, libx.so.1.2).
var sharedObject = regexp.MustCompile(`\.so(\.[0-9.]+)?$`)

// nodeLocalTrees are the trees each node has of its own: calls there never
// reach a shared file system, so the fold tests do not count them.
var nodeLocalTrees = []string{"/etc", "/proc", "/sys", "/dev", "/tmp", "/run"}

// OriginalCalls reads an strace log from the app's first successful execve
// (isApp says which path is the app's) on, and returns its file calls on
// the original trees: absolute paths that are not in the stage (inStage)
// nor in a node-local tree, no getcwd; and, among them, the opens of
// shared objects that succeeded.
func OriginalCalls(t testing.TB, log string, isApp, inStage func(path string) bool) (calls, libOpens []string) {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("no strace log: %v", err)
	}
	lines := strings.Split(string(b), "\n")
	start := -1
	for i, l := range lines {
		if m := straceFileCall.FindStringSubmatch(l); m != nil && m[1] == "execve" && isApp(m[2]) && !strings.Contains(l, "= -1") {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no execve of the app", log)
	}
	for _, l := range lines[start+1:] {
		m := straceFileCall.FindStringSubmatch(l)
		if m == nil || m[1] == "getcwd" || !strings.HasPrefix(m[2], "/") || m[2] == "/" || inStage(m[2]) || inNodeLocalTree(m[2]) {
			continue
		}
		calls = append(calls, l)
		if strings.HasPrefix(m[1], "open") && sharedObject.MatchString(m[2]) && !strings.Contains(l, "= -1 ") {
			libOpens = append(libOpens, l)
		}
	}
	return calls, libOpens
}

func inNodeLocalTree(p string) bool {
	for _, pre := range nodeLocalTrees {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// EndsIn says whether a path names prog (its last element).
func EndsIn(prog string) func(string) bool {
	return func(p string) bool { return strings.HasSuffix(p, "/"+prog) }
}

// InAStage says whether a path lies in a published stage (a sha256-
// directory of any stage dir).
func InAStage(p string) bool { return strings.Contains(p, "/sha256-") }
