// Package untrusted prints text that someone else chose (paths, symlink
// targets and names from an image, a trace or a registry) so that it cannot
// pass for something else on a terminal or in a log: a newline in a path
// must not forge an output line, an escape sequence must not move the
// cursor or retitle the window, a right-to-left override must not reorder
// what follows.
//
// It must not decide what is trusted: callers pass every string that came
// from outside, whatever it looks like.
package untrusted
