package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// createImageFile creates the file build writes the image to (pattern as
// for os.CreateTemp). On Lustre it first tries to give the file a layout
// striped over all OSTs (lfs setstripe -c -1), because at N nodes the image
// is read N times, and with the usual default of one stripe all of it comes
// from a single OST. A layout is set only when the file is created, so lfs
// creates it. Best effort: without lfs, off Lustre (lfs getstripe -d fails)
// or when setstripe fails, the file gets the directory's default layout,
// and msg says which happened when it matters.
func createImageFile(dir, pattern string, msg io.Writer) (*os.File, error) {
	lfs, err := exec.LookPath("lfs")
	if err != nil || exec.Command(lfs, "getstripe", "-d", dir).Run() != nil {
		return os.CreateTemp(dir, pattern) // not Lustre (or no lfs): nothing to do
	}
	var r [8]byte
	rand.Read(r[:])
	name := filepath.Join(dir, strings.Replace(pattern, "*", hex.EncodeToString(r[:]), 1))
	out, err := exec.Command(lfs, "setstripe", "-c", "-1", name).CombinedOutput()
	if err != nil {
		os.Remove(name)
		fmt.Fprintf(msg, "build: note: lfs setstripe -c -1 failed (%s); the image keeps %s's default striping — every node's read may hit the same OSTs\n",
			strings.TrimSpace(string(out)), dir)
		return os.CreateTemp(dir, pattern)
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		os.Remove(name)
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil { // as os.CreateTemp's; build sets the final mode
		f.Close()
		os.Remove(name)
		return nil, err
	}
	fmt.Fprintf(msg, "build: striped the image over all OSTs (lfs setstripe -c -1): the nodes' reads are spread over the file system's servers\n")
	return f, nil
}
