package main

import (
	"syscall"
	"testing"
)

// A SIGTERM that arrives while exec stages is reported by stop even when it
// comes at the very end (after the last look at the context, just before
// stop): exec then dies by it instead of starting the app (issue 10 item 5:
// signal.NotifyContext's stop swallowed it, and the app started anyway).
func TestNotifySignalsReportsLateSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		ctx, stop := notifySignals()
		if err := syscall.Kill(syscall.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		got := stop() // at once: the context may not even be cancelled yet
		if got != sig {
			t.Fatalf("stop after %v returned %v", sig, got)
		}
		if ctx.Err() == nil {
			t.Fatal("the context is not cancelled after stop")
		}
	}
	ctx, stop := notifySignals()
	if got := stop(); got != nil {
		t.Fatalf("stop without a signal returned %v", got)
	}
	if ctx.Err() == nil {
		t.Fatal("the context is not cancelled after stop")
	}
}
