package doorcheck

// Allowed are the functions of the checked trees that may call os, syscall
// or unix on a non-constant path directly, each with the reason no other
// user can have a say in that path (or why the door does not apply). Keys
// are "<module-relative import path>.<Func>" or ".<Type>.<Method>".
// Keep it short: an entry is a place the rule is not enforced, and a new
// entry is reviewed like the code it exempts.
var Allowed = map[string]string{}

// Reasons shared by several entries.
const (
	inStage = "a path inside the stage dir that OpenStageDir/OpenStageDirFor checked (every component root's or the user's, none writable by group or others unless sticky), so no other user can create, rename or swap a name in it"
	ownIn   = "the caller reading a file it named itself on the command line (its own input, opened with its own credentials): the kernel decides what it may read"
	ownOut  = "the image output named on the command line, made beside it as a new O_EXCL temporary file and renamed; the target's directory is walked by the rule first (image.CreateOutput's walk)"
	procfs  = "a /proc file of a pid, read as the caller: procfs itself decides access"
	nodeLib = "a file of the node's own system (the node's ld.so or libc, named by PT_INTERP or ld.so's cache), root's: not a path a user chooses"
	image   = "a path the caller's own image, built by the caller, names on the caller's own file system, read with the caller's credentials"
)

func init() {
	for _, e := range []struct{ fn, why string }{
		// cmd/dlbundle: where the Slurm plugin stages, for report.
		{"cmd/dlbundle.eachLine", "Slurm's slurm.conf and plugstack.conf (and what they include), read as the caller with its own credentials, only to choose where the caller's own report looks; regular files only (O_NONBLOCK, then fstat), at most 1 MiB; the stage dir chosen is then checked by the rule like any other"},
		// node: the stage dir and what is staged in it.
		{"node.lookupAlias", inStage},
		{"node.removeTree", inStage},
		{"node.Broadcasted", inStage},
		{"node.LockBroadcast", inStage},
		{"node.stageUsers", procfs},
		{"node/materialize.Materialize", inStage + " (the new stage, made 0700 by the staging child)"},
		{"node/materialize.keepRules", inStage},
		{"node/materialize.mkdirsIn", inStage},
		{"node/materialize.readKeptRules", inStage},
		{"node/materialize.relativizeSymlinks", inStage},
		{"node/materialize.writeSearchRules", inStage},
		{"node/materialize.writeTable", inStage},
		{"node/materialize.probedNames", inStage},
		{"node/materialize.nodeLdso", nodeLib + "; opened O_NONBLOCK"},
		// loader: the stage it runs from, and the node's libc.
		{"loader/stagefmt.WriteShimObjects", inStage},
		{"loader/stagefmt.RecordPreload", inStage},
		{"loader/stagefmt.MarkNodeELF", inStage},
		{"loader/stagefmt.WriteLdsoChoice", inStage + "; and " + nodeLib},
		{"loader/stagefmt.MapTable", inStage},
		{"loader/stagefmt.WriteSearch", inStage + " (the new stage's table, written before the stage is published)"},
		{"loader/stagefmt.openStagedTree", inStage},
		{"loader/stagefmt.stagedTree.open", inStage + " (os.Root keeps every open beneath it)"},
		{"loader/stagefmt.openLibc", nodeLib},
		{"loader/stagefmt.LibcDefines", nodeLib},
		{"loader/stagefmt.openNodeFile", "a driver library of the node at the path the image records (only names squash.NodeBound accepts: libcuda.so*, libnvidia-*...) or where the node's own ld.so.cache puts that name, or a glibc object beside the node's libc; read as data (stat first: a FIFO or device is never opened; O_NONBLOCK, then fstat: the same regular file) for its ELF version needs, of which only a glibc version name can reach a message"},
		{"loader.StagedScript", inStage},
		{"loader.isELF", "a program the caller asked to run, found on its own PATH as execve would: the caller's own input"},
		// cmd/dlbundle: the caller's own inputs and outputs.
		{"cmd/dlbundle.sniffInput", ownIn},
		{"cmd/dlbundle.readReportFile", ownIn},
		{"cmd/dlbundle.hasImageFooter", ownIn},
		{"cmd/dlbundle.writePage", ownIn + " (the report files given to --html)"},
		{"cmd/dlbundle.fileDigest", image},
		{"cmd/dlbundle.listingChange", image},
		{"cmd/dlbundle.createImageFile", ownOut},
		{"cmd/dlbundle.newPartialImage", ownOut},
		{"cmd/dlbundle.PullCmd.pullToStream", "pull's own temporary directory (os.MkdirTemp, 0700, named by the kernel's random suffix) and the files it wrote there"},
		{"cmd/dlbundle.ReportCmd.openReport", ownIn + " (the node's records go through the checked records dir instead)"},
	} {
		Allowed[e.fn] = e.why
	}
}
