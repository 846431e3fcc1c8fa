package main

import (
	"syscall"
	"testing"
)

// A SIGTERM that arrives while exec stages is reported by stop even when
// staging went on to succeed (it came after the last look at the context):
// exec then dies by it instead of starting the app (before the fix,
// signal.NotifyContext's stop cancelled the context itself, so a signal could
// not be told from no signal, and the app started anyway). The end-to-end
// check is loader's TestExecSIGTERMDuringStagingNeverStartsApp.
func TestNotifySignalsReportsLateSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		ctx, stop := notifySignals(false)
		if err := syscall.Kill(syscall.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		<-ctx.Done() // staging sees the cancel; say it succeeded all the same
		if got := stop(); got != sig {
			t.Fatalf("stop after %v returned %v", sig, got)
		}
	}
	ctx, stop := notifySignals(false)
	if got := stop(); got != nil {
		t.Fatalf("stop without a signal returned %v", got)
	}
	if ctx.Err() == nil {
		t.Fatal("the context is not cancelled after stop")
	}
}
