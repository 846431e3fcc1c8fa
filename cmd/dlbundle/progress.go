package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dlbundle/dlbundle/internal/units"

	"golang.org/x/sys/unix"
)

// progressBar redraws one line on stderr at most 10 times a second. It is
// only drawn on a terminal: newProgress returns nil otherwise, and a nil
// *progressBar does nothing, so callers need no checks.
type progressBar struct {
	mu          sync.Mutex // parallel workers may report at once
	label       string
	start, last time.Time
	drawn       bool
}

// newProgress returns a bar labelled "dlbundle VERB: label" with the verb
// that runs (stage stages through exec's code, and its bar must say stage),
// or nil when stderr is not a terminal (batch jobs and logs get no
// carriage-return noise).
func newProgress(label string) *progressBar {
	if !isTerminal(os.Stderr) {
		return nil
	}
	return &progressBar{label: verbPrefix() + label, start: time.Now()}
}

// verbPrefix starts a message of the running verb: "dlbundle stage: ".
func verbPrefix() string {
	if runningVerb == "" {
		return "dlbundle: "
	}
	return "dlbundle " + runningVerb + ": "
}

// callback returns p.update, or nil for a nil bar, for options whose nil
// Progress means "no progress wanted".
func (p *progressBar) callback() func(done, total int64) {
	if p == nil {
		return nil
	}
	return p.update
}

func (p *progressBar) update(done, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if done < total && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.drawn = now, true
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	const width = 30
	n := min(max(int(pct/100*width), 0), width)
	rate := float64(done) / max(now.Sub(p.start).Seconds(), 1e-3)
	fmt.Fprintf(os.Stderr, "\r%s [%s%s] %s / %s %3.0f%% %s/s \x1b[K", p.label,
		strings.Repeat("=", n), strings.Repeat(" ", width-n), units.Bytes(done), units.Bytes(total), pct, units.Bytes(int64(rate)))
}

// finish ends the line if one was drawn.
func (p *progressBar) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(os.Stderr)
	}
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
