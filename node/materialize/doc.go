// Package materialize writes a stage: Materialize lays out, in a fresh
// private directory that package node then publishes, the extracted tree,
// the lookup table, the shim objects and this node's ld.so search rules
// (the format of each is package loader/stagefmt's). It is the stager:
//
//	materialize.go  Materialize: extract, table beside it, symlinks made
//	                relative, shim, search rules, mirrored directories
//	bounds.go       the stage's cost computed from the TOC and refused
//	                before anything is written when it does not fit
//	arch.go         refusing an image built for another architecture
//	ldsearch.go     the node's ld.so search rules: probed once per node
//	                from the node's own ld.so, kept in the stage dir
//
// It runs as the user the stage is for: in `dlbundle exec`'s first rank on
// a node, in `dlbundle stage` run by the user, or in the child that `stage
// --user` (root, e.g. in a Prolog) starts as the job's user with
// no_new_privs (node/privchild.go). Root runs it only for a stage of root's
// own, never for another user's. Everything it reads is an image someone else may have
// built: it must not execute anything from the image (the search rules come
// from the node's ld.so, TestStageRunsNothingFromImage), follow the image's
// symlinks out of the staged tree (stagefmt's stagedtree.go), create
// privileged files, or write outside the directory it is given; it decides
// nothing about where a stage lives or who may use it (package node does).
//
// It imports loader/stagefmt and image, never loader (the code each rank
// runs) nor node: loader's tests build their stages with it.
package materialize
