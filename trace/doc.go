// Package trace owns the pilot run: it starts the app under ptrace (with a
// seccomp filter so that only file-related system calls stop it), follows every
// process and thread, and records each lookup, open, listing and modification
// as a trace (JSON Lines, docs/trace-format.md).
//
// It must not decide what gets bundled (that is package squash) and must not
// change what the app does: the traced run behaves as a native one.
//
// How a run goes (Run, run.go):
//   - the output file is created first (an unwritable path fails before the
//     app starts) and the command is resolved like a shell does (127/126);
//   - the app is started under PTRACE_TRACEME and, stopped before its first
//     instruction, made to call prctl(PR_SET_NO_NEW_PRIVS) and seccomp(2)
//     with the filter (inject.go; the filter is assembled in filter.go). The
//     stub (stub.go: dlbundle re-executed as the hidden verb __trace-stub,
//     which loads the filter and execs the app) does the same with a second
//     start of dlbundle; the tests compare the two;
//   - one locked OS thread (tracer.go) runs every ptrace request: at a seccomp
//     stop it decodes the arguments (regs.go and the architecture's
//     syscalls_linux_<arch>.go, memory.go) and
//     either computes the outcome itself (stats, failing opens: predict.go)
//     or catches the exit for the result with PTRACE_SYSCALL; getdents64
//     buffers are collected per directory (dirents.go) into one listing;
//     records are written as JSON Lines by jsonenc.go;
//   - when the main process exits, survivors are detached, the end record is
//     written, the file renamed into place and a summary printed (summary.go).
//
// Requirements: Linux >= 4.8 on x86_64 or arm64, ptrace permitted. Run waits for any
// child of the calling process (wait4(-1)): nothing else in the process may
// start children while it runs.
package trace
