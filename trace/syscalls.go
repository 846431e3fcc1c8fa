package trace

// argIdx names a system call argument register; the zero value means "none",
// so that a table entry lists only the arguments the call has.
type argIdx int8

const (
	argNone argIdx = iota
	a0
	a1
	a2
	a3
	a4
	a5
)

// scSpec says how to turn one traced system call into an Event.
type scSpec struct {
	name       string
	op         Op
	dirfd      argIdx // directory fd the path is relative to (none: the cwd)
	path       argIdx // pointer to the path string
	dirfd2     argIdx // same for a second path (rename, link)
	path2      argIdx
	rawPath2   argIdx // second string kept as written (symlink target)
	flags      argIdx // O_* or AT_* flags
	fixedFlags int    // flags implied by the call itself (creat, lstat)
	fdArg      argIdx // fd-based calls (fchdir, getdents64)
	outBuf     argIdx // buffer filled by the kernel (readlink text, dirents)
	howArg     argIdx // openat2: pointer to struct open_how (flags first)
}

func (a argIdx) of(args [6]uint64) uint64 { return args[a-1] }
