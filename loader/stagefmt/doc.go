// Package stagefmt is the format of a stage, the one thing the stager (which
// writes a stage: package node/materialize, as the user, once per node) and
// the ranks (which read it: package loader in each rank, and the C shim in
// each process of the app) must agree on. It holds
//
//	layout.go      the names of a stage's files (STAGE/root, table, search,
//	               shim/...), what a usable stage must hold (Essentials) and
//	               the longest stage directory the shim accepts
//	table.go       the lookup table: its typed records (struct dlb_header,
//	               dlb_entry, dlb_record of loader/shim/table.h, through
//	               internal/binrec), the encoder, the reader the shim's
//	               lookups are mirrored by, MarkNodeELF's in-place flag
//	tablemap.go    mapping a stage's table read-only (exec's lookups)
//	resolve.go     following the table's symlinks as the shim does
//	search.go      STAGE/search, this node's ld.so rules, as audit.c reads it
//	shim.go        the shim objects put into every stage (embedded by the
//	               Go packages in loader/shim/amd64 and loader/shim/arm64)
//	               and the preload build chosen for this node's libc
//	stagedtree.go  reading a staged tree's files without leaving it
//
// It is its own package so that the writer need not import the code every
// rank runs, nor the ranks the code that writes: it imports neither loader
// nor node (nor node/materialize), and neither of them re-states a file name
// or a record layout. Everything it decodes comes from a stage an image
// filled, possibly as root: a reader must not trust a length or an offset it
// has not bounded (FuzzTable), nor follow a symlink of the staged tree
// (stagedtree.go).
package stagefmt
