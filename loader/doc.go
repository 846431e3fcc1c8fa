// Package loader is what runs in a rank: given a published stage, it builds
// the app's environment (ShimEnv: LD_AUDIT and LD_PRELOAD name the shim,
// LD_LIBRARY_PATH entries mapped to the stage), answers exec's questions
// from the stage's lookup table (StagedPath, StagedScript, ImageLacks) and
// turns a stage and a command line into the program to start (Start: what
// exec execs and what env's launchers start), with a setuid or setgid
// original run natively (privileged.go). In reading order:
//
//	env.go            ShimEnv: the shim's variables, LD_LIBRARY_PATH mapped
//	staged.go         StagedPath, StagedScript: a command's staged copy, a
//	                  bundled #! script's interpreter
//	commandsearch.go  ImageLacks: a PATH candidate the image's listing denies
//	launch.go         Start: execvp's search asked of the stage first, #!
//	privileged.go     a setuid or setgid original runs natively
//	shim.go           go generate for the C shim (shim/*.c)
//
// Everything else about a stage lives apart, along the line between who
// writes it and who reads it:
//
//	loader/stagefmt   the stage's format, shared by writer and readers: file
//	                  names, the lookup table's records, encoder and mmap
//	                  reader, the shim objects
//	node/materialize  the writer (the stager, as the stage's user)
//	node              where stages live, locks, publication, gc (root in a
//	                  Prolog, or the first rank)
//	report            reading the reports the shim writes
//
// loader imports stagefmt only: never node, node/materialize or report, so
// that a rank links none of the writer's or the reports' code. Its tests
// build real stages with node/materialize, which is allowed because the
// writer does not import loader.
//
// The shim itself (shim/*.c) is the only code that runs inside the app; it
// is compiled by `go generate ./loader/` (shim.go) and embedded by the
// packages in shim/amd64 and shim/arm64. This package must not touch the
// shared file system where the stage can answer: a bundled command is found
// in the table, and paths are made absolute with getcwd (internal/abspath),
// never by a stat of $PWD.
package loader
