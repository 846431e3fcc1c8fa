package trace

// getdents: the test helper of this package is named dirent.
import getdents "github.com/dlbundle/dlbundle/internal/dirent"

// Linux d_type values (dirent.h).
const (
	dtUnknown = 0
	dtDir     = 4
	dtReg     = 8
	dtLnk     = 10
)

// parseDirents decodes a buffer filled by getdents64 in the tracee
// (internal/dirent checks every length: the buffer is the tracee's) and
// appends its names to out, leaving out "." and "..".
func parseDirents(buf []byte, out []DirEntry) ([]DirEntry, error) {
	for len(buf) > 0 {
		var rec getdents.Record
		var err error
		if rec, buf, err = getdents.Next(buf); err != nil {
			return out, err
		}
		if s := string(rec.Name); s != "." && s != ".." {
			out = append(out, DirEntry{Name: s, Type: direntType(rec.Type)})
		}
	}
	return out, nil
}

func direntType(t byte) string {
	switch t {
	case dtReg:
		return "reg"
	case dtDir:
		return "dir"
	case dtLnk:
		return "symlink"
	case dtUnknown:
		return "" // the file system does not say: the tracer asks lstat
	}
	return "other"
}
