package image

// Type says what a path is in the image.
type Type string

// Entry types. See docs/SPEC.md.
const (
	TypeRegular  Type = "reg"      // bundled regular file: content in the image
	TypeDir      Type = "dir"      // directory with a complete listing
	TypeSymlink  Type = "symlink"  // symbolic link: Target holds the link text
	TypeMissing  Type = "missing"  // did not exist at build time (a known ENOENT)
	TypeExternal Type = "external" // exists but is not bundled (lookups pass through)
)

// Kind says what a regular file is used for (informational: inspect, reports).
type Kind string

// Kinds of regular files.
const (
	KindELFShared   Kind = "elf-shared"   // ELF shared object (ET_DYN without an interpreter)
	KindELFExec     Kind = "elf-exec"     // ELF executable (ET_EXEC, or ET_DYN with PT_INTERP)
	KindPySource    Kind = "py-source"    // .py
	KindPyBytecode  Kind = "py-bytecode"  // .pyc
	KindPyExtension Kind = "py-extension" // ELF shared object loaded as a Python extension module
	KindScript      Kind = "script"       // #! script
	KindData        Kind = "data"         // anything else
)

// DirEntry is one name in a directory listing.
type DirEntry struct {
	Name string `json:"name"`
	Type Type   `json:"type"` // reg, dir, symlink, or "other" (sockets, devices, fifos)
	// Ino is the d_ino the directory read returned (0: not recorded), so
	// that a listing served from a stage shows the original inode numbers.
	Ino uint64 `json:"ino,omitempty"`
}

// Frame locates one zstd frame of an object's content in the image file.
type Frame struct {
	Offset int64 `json:"off"`   // byte offset of the frame in the image file
	CSize  int64 `json:"csize"` // compressed size of the frame
	USize  int64 `json:"usize"` // bytes of file content it yields (cpio headers excluded)
}

// Entry is one path in the table of contents. The same struct is the input of
// the writer (Frames and SHA256 are then filled in by the writer) and what the
// reader returns: a Go view of an entry record (docs/SPEC.md 1.3), whose
// strings, listing, dots and frames share a few arrays of the decoded TOC
// (do not modify them).
type Entry struct {
	Path    string     `json:"path"` // absolute, normalised original path
	Type    Type       `json:"type"`
	Mode    uint32     `json:"mode,omitempty"` // permission and type bits as in st_mode
	Size    int64      `json:"size,omitempty"` // regular files: content bytes
	MtimeNS int64      `json:"mtime_ns,omitempty"`
	SHA256  string     `json:"sha256,omitempty"` // hex digest of the content (regular files)
	Kind    Kind       `json:"kind,omitempty"`
	Order   int        `json:"order"`             // position in the load order (first use), 0-based
	Target  string     `json:"target,omitempty"`  // symlinks: link text as read
	Listing []DirEntry `json:"listing,omitempty"` // directories: complete, in the order the directory read returned, names unique
	Frames  []Frame    `json:"frames,omitempty"`  // regular files: where the content is
	// FramesSHA256 is the hex SHA-256 of the object's compressed frames, as
	// stored, concatenated: staging checks it (a third of the bytes to hash)
	// instead of the content digest. Filled in by the writer.
	FramesSHA256 string `json:"frames_sha256,omitempty"`

	// Attributes of the source as stat(2) showed them at build time, so that
	// the loader can answer stat exactly as the original file system would.
	UID     uint32 `json:"uid,omitempty"`
	GID     uint32 `json:"gid,omitempty"`
	Nlink   uint32 `json:"nlink,omitempty"`
	Dev     uint64 `json:"dev,omitempty"`
	Ino     uint64 `json:"ino,omitempty"`
	CtimeNS int64  `json:"ctime_ns,omitempty"`
	AtimeNS int64  `json:"atime_ns,omitempty"`
	// Blocks is st_blocks (512-byte units); 0: not recorded (derive from
	// the size). DirSize is a directory's own st_size (0: not recorded).
	Blocks  int64 `json:"blocks,omitempty"`
	DirSize int64 `json:"dir_size,omitempty"`
	// DotDotIno is the d_ino of ".." that a directory's read returned (0:
	// not recorded), which a stage cannot know when the parent is not in
	// the image (node-local, unreadable, a mount point's). Dots are the
	// positions at which the read returned "." and ".." among all the names
	// it returned, both counted (ext4 returns them in hash order too);
	// nil: [0, 1], first (the reader returns nil for [0, 1]). Directories
	// only: the TOC's dots record (docs/SPEC.md 1.3).
	DotDotIno uint64 `json:"dotdot_ino,omitempty"`
	Dots      []int  `json:"dots,omitempty"`

	// SourcePath is where the writer reads the content from (defaults to
	// Path). Not serialised.
	SourcePath string `json:"-"`
}
