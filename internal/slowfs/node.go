package slowfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is go-fuse's loopback node with every metadata operation sent through
// the metadata queue first. NodeWrapChilder makes every child created by the
// loopback code a node too.
type node struct {
	*fs.LoopbackNode
	fsys *FS
}

var (
	_ fs.NodeWrapChilder     = (*node)(nil)
	_ fs.NodeLookuper        = (*node)(nil)
	_ fs.NodeGetattrer       = (*node)(nil)
	_ fs.NodeOpener          = (*node)(nil)
	_ fs.NodeOpendirHandler  = (*node)(nil)
	_ fs.NodeReadlinker      = (*node)(nil)
	_ fs.FileReader          = (*file)(nil)
	_ fs.FileReaddirenter    = (*dir)(nil)
	_ fs.FileSeekdirer       = (*dir)(nil)
	_ fs.FileReleasedirer    = (*dir)(nil)
	_ fs.FilePassthroughFder = (*file)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fsys: n.fsys}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fsys.metadata(OpLookup, n, name)
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fsys.metadata(OpGetattr, n, "")
	return n.LoopbackNode.Getattr(ctx, f, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	n.fsys.metadata(OpReadlink, n, "")
	return n.LoopbackNode.Readlink(ctx)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.fsys.metadata(OpOpen, n, "")
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &file{LoopbackFile: fh.(*fs.LoopbackFile), fsys: n.fsys}, fuseFlags, 0
}

// OpendirHandle is where go-fuse's loopback reads directories (not Readdir).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.fsys.metadata(OpOpendir, n, "")
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dir{inner: fh, fsys: n.fsys, node: n}, fuseFlags, 0
}

// file is an open regular file whose reads are counted and charged per MiB.
type file struct {
	*fs.LoopbackFile
	fsys *FS
}

// PassthroughFd declines kernel passthrough: passthrough reads would bypass
// slowfs, so they could be neither counted nor slowed down.
func (f *file) PassthroughFd() (int, bool) { return 0, false }

// Read reads into buf itself (instead of go-fuse's lazy fd result) so that the
// bytes actually returned are known and counted.
func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	fd, ok := f.LoopbackFile.PassthroughFd() // the open descriptor; valid until Release
	if !ok {
		return nil, syscall.EBADF
	}
	n, err := unix.Pread(fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	f.fsys.dataRead(n)
	return fuse.ReadResultData(buf[:n]), 0
}

// dir is an open directory. Each READDIR request from the kernel costs one
// metadata operation, however many entries it returns.
type dir struct {
	inner fs.FileHandle
	fsys  *FS
	node  *node
	// lastRequest identifies the READDIR request being answered: go-fuse calls
	// Readdirent once per entry, with a fresh context per request (held here
	// so that its address cannot be reused by a later request).
	lastRequest context.Context
}

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if ctx != d.lastRequest {
		d.lastRequest = ctx
		d.fsys.metadata(OpReaddir, d.node, "")
	}
	return d.inner.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.inner.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dir) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.inner.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}
