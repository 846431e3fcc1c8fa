// Package node is the node side of dlbundle: the code that runs as root in
// a Slurm Prolog (`dlbundle stage`) or in gc (`dlbundle gc`, `dlbundle ls`),
// and as the user in the first rank of `dlbundle exec` on a node. It
// decides where a node keeps its stages and whether that place can be
// trusted, stages an image there once per node under a lock, publishes it
// atomically, and removes stages no job uses.
//
// Everything here handles paths and files other users may control (the
// stage directory's ancestors, the image file, a squatted default) and
// images users built or pulled: nothing from an image executes, no path
// another user controls is trusted, every resource is bounded by what is
// declared (docs/security.md lists each rule with its test).
//
// A reviewer reads it whole, in this order:
//
//	stagedir.go       where the stage directory is and the trust walk to it
//	stagedirsquat.go  the fallback when the default directory is squatted
//	stagepattern.go   --stage-dir patterns (%u %j %n) expanded safely
//	stagelock.go      the flock that makes one process per node stage
//	stagealias.go     by-path aliases: later ranks find a stage without the image
//	stage.go          staging: alias, lock, materialize in tmp.*, publish, failure markers
//	stageimage.go     opening the image file under the trust rules, or pulling it
//	ensure.go         Ensure: the one call exec, env, stage and the launcher plugins make
//	consume.go        removing a node-local copy once staged (stage --consume)
//	lifecycle.go      ls and gc: what is staged, and removing what no job uses
//	privileged.go     stage --user: the one table of what root does for a
//	                  job's user (open, lock, temp, publish, alias), nothing else
//	privchild.go      the child, as the user, that reads the image for it
//
// What a stage holds (the tree, the lookup table, the shim objects, the
// node's ld.so search rules) is written by package node/materialize, which
// Stage calls as the stage's user (in the first rank, or in privchild.go's
// child as the job's user); its format is package loader/stagefmt's.
// Neither imports node, and node does not import loader (the code that runs
// in every rank).
package node
