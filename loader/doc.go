// Package loader is the process side of dlbundle: what a stage holds and how
// the app is run from it. It lays out a stage (Materialize: the extracted
// tree, the lookup table that the C preload shim maps, the shim objects and
// the node's ld.so search rules), reads the table back (StagedPath,
// StagedScript), builds the app's environment (ShimEnv), turns a stage and
// a command line into the program to start (Start: what exec execs and
// what env's launchers start). The shim's reports are read by package report.
//
// Where a stage lives, who may stage it, the lock, aliases, publication and
// gc are the node side's: package node, which calls Materialize. loader never
// imports node.
//
// The shim itself (shim/*.c) is the only code that runs inside the app; it is
// compiled by `go generate` and embedded. This package must not touch the
// shared file system more than reading the image once per node.
package loader
