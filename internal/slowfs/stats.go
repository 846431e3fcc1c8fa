package slowfs

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Op is a kind of request the kernel sent to slowfs.
type Op int

// Metadata operations (each costs one service time on the metadata queue),
// then data reads.
const (
	OpLookup Op = iota
	OpGetattr
	OpOpen
	OpOpendir
	OpReaddir
	OpReadlink
	OpRead
	numOps
)

var opNames = [numOps]string{"lookup", "getattr", "open", "opendir", "readdir", "readlink", "read"}

func (o Op) String() string { return opNames[o] }

// Stats is a snapshot of what slowfs served since mount or the last Reset.
type Stats struct {
	Lookup   uint64 `json:"lookup"`
	Getattr  uint64 `json:"getattr"`
	Open     uint64 `json:"open"`
	Opendir  uint64 `json:"opendir"`
	Readdir  uint64 `json:"readdir"`
	Readlink uint64 `json:"readlink"`
	// Read counts READ requests; BytesRead the bytes they returned.
	Read      uint64 `json:"read"`
	BytesRead uint64 `json:"bytes_read"`
	// MetaBusy is the total service time of the metadata queue.
	MetaBusy time.Duration `json:"meta_busy_ns"`
}

// MetadataOps is the number of operations that went through the metadata queue.
func (s Stats) MetadataOps() uint64 {
	return s.Lookup + s.Getattr + s.Open + s.Opendir + s.Readdir + s.Readlink
}

// String formats the snapshot on one line, for logs and the unmount summary.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "metadata ops %d (lookup %d, getattr %d, open %d, opendir %d, readdir %d, readlink %d), ",
		s.MetadataOps(), s.Lookup, s.Getattr, s.Open, s.Opendir, s.Readdir, s.Readlink)
	fmt.Fprintf(&b, "reads %d (%d bytes), metadata server busy %v", s.Read, s.BytesRead, s.MetaBusy.Round(time.Microsecond))
	return b.String()
}

// counters are the live, lock-free counts behind Stats.
type counters struct {
	ops   [numOps]atomic.Uint64
	bytes atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Lookup:    c.ops[OpLookup].Load(),
		Getattr:   c.ops[OpGetattr].Load(),
		Open:      c.ops[OpOpen].Load(),
		Opendir:   c.ops[OpOpendir].Load(),
		Readdir:   c.ops[OpReaddir].Load(),
		Readlink:  c.ops[OpReadlink].Load(),
		Read:      c.ops[OpRead].Load(),
		BytesRead: c.bytes.Load(),
	}
}

func (c *counters) reset() {
	for i := range c.ops {
		c.ops[i].Store(0)
	}
	c.bytes.Store(0)
}
