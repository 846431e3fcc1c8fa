// Package oneproc runs dlbundle's start on one P (GOMAXPROCS 1) until Restore.
//
// A warm `dlbundle exec` only looks a few things up and execs the app: it
// needs no parallelism, and every P beyond the first costs it page faults
// (each P has its own allocation cache, so the package initializers'
// allocations spread over more fresh pages, and more threads start): 38 of
// ~636 minor faults and ~2 ms of CPU on 2 CPUs, 68 faults with 64 Ps, at
// ~25 us a fault on the benchmark VM (docs/bench/cli.md). The price is one
// stop-the-world at init and one more at Restore, each of which may wait for
// another thread to be scheduled on a busy node (~1 ms of wall time for
// `dlbundle --version` at load 4 on 2 CPUs); where the runtime started with
// one P (a rank bound to one core) both are no-ops. The runtime sizes GOMAXPROCS before any
// Go code runs, so this package's initializer sets it to 1 as early as
// dlbundle's own code can: it imports nothing but runtime, and Go
// initializes the first ready package in import-path order, so it runs
// before most of the other initializers. Everything that does parallel work
// (staging, build, trace) calls Restore first; main calls it for every verb
// but exec and the trace stub, and exec when it finds no published stage.
package oneproc
