package squash

import (
	"encoding/binary"
	"fmt"
	"github.com/dlbundle/dlbundle/image"
	"io"
	"os"
	"path"
	"strings"
)

// pycSource returns the source a __pycache__ file caches:
// dir/__pycache__/m.cpython-311[.opt-1].pyc -> dir/m.py.
func pycSource(pyc string) (string, bool) {
	cache := path.Dir(pyc)
	if path.Base(cache) != "__pycache__" || !isPycName(path.Base(pyc)) {
		return "", false
	}
	module, _, _ := strings.Cut(path.Base(pyc), ".")
	if module == "" {
		return "", false
	}
	return path.Join(path.Dir(cache), module+".py"), true
}

// checkPyc reports whether a bytecode cache is valid for its source now, as
// CPython checks it (PEP 552): the 16-byte header holds a magic number
// ending in "\r\n", flags, then (timestamp pycs) the source's mtime in whole
// seconds and its size, both as little-endian uint32. Hash-based pycs
// (flags != 0) are not validated here and so not bundled.
func checkPyc(pyc string) error {
	src, ok := pycSource(pyc)
	if !ok {
		return fmt.Errorf("%s is not in a __pycache__ directory", pyc)
	}
	f, err := image.OpenSource(pyc)
	if err != nil {
		return err
	}
	defer f.Close()
	var h [16]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return fmt.Errorf("%s: header: %v", pyc, err)
	}
	if h[2] != '\r' || h[3] != '\n' {
		return fmt.Errorf("%s: not a Python bytecode file (bad magic)", pyc)
	}
	if flags := binary.LittleEndian.Uint32(h[4:8]); flags != 0 {
		return fmt.Errorf("%s: hash-based bytecode (flags %#x), not validated", pyc, flags)
	}
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("%s: source: %v", pyc, err)
	}
	mtime, size := binary.LittleEndian.Uint32(h[8:12]), binary.LittleEndian.Uint32(h[12:16])
	if mtime != uint32(st.ModTime().Unix()) || size != uint32(st.Size()) {
		return fmt.Errorf("%s: records source mtime %d size %d, %s has mtime %d size %d now",
			pyc, mtime, size, src, uint32(st.ModTime().Unix()), st.Size())
	}
	return nil
}
