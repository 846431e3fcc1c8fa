// Package startup is the start-up-at-width benchmark: it serves application
// trees from slowfs (a contended shared file system), starts N ranks at the
// same instant and measures native runs against the ideal (the same tree on
// tmpfs) and dlbundle exec (cold: the first rank stages; warm: stage reused).
//
// It owns the scenarios, the rank launcher and the report (CSV, SVG,
// markdown), and `make demo`'s quick configuration with its one-screen
// summary (demo.go); it drives dlbundle only through its command line and
// must not import the packages it measures.
package startup
