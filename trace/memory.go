package trace

import (
	"bytes"
	"syscall"

	"golang.org/x/sys/unix"
)

const pageSize = 4096

// maxPathRead bounds a string read from a tracee (PATH_MAX plus slack).
const maxPathRead = 8192

// readMem copies len(buf) bytes at addr from the tracee with process_vm_readv
// (one system call instead of a PTRACE_PEEKDATA per word).
func readMem(tid int, addr uint64, buf []byte) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	return unix.ProcessVMReadv(tid, local, remote, 0)
}

// readString reads a NUL-terminated string from the tracee. It reads page by
// page so that a string near the end of a mapping does not fault, through
// buf (pageSize bytes, reused: a fresh 4 KiB per call made the heap grow by
// a page fault per traced call until the next garbage collection).
func readString(tid int, addr uint64, buf []byte) (string, error) {
	if addr == 0 {
		return "", syscall.EFAULT
	}
	var out []byte
	for len(out) < maxPathRead {
		chunk := pageSize - int(addr%pageSize)
		n, err := readMem(tid, addr, buf[:chunk])
		if err != nil {
			return "", err
		}
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			if out == nil {
				return string(buf[:i]), nil
			}
			return string(append(out, buf[:i]...)), nil
		}
		out = append(out, buf[:n]...)
		addr += uint64(n)
	}
	return string(out), nil
}
