// Package trace owns the pilot run: it starts the app under ptrace (with a
// seccomp filter so that only file-related system calls stop it), follows every
// process and thread, and records each lookup, open, listing and modification
// as a trace (JSON Lines, docs/trace-format.md).
//
// It must not decide what gets bundled (that is package squash) and must not
// change what the app does: the traced run behaves as a native one.
package trace
