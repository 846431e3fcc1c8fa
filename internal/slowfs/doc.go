// Package slowfs is a contended shared file system that runs on one machine:
// a FUSE passthrough of a source directory in which every metadata operation
// (lookup, getattr, open, opendir, readdir, readlink) waits its turn in ONE
// queue with a fixed service time, like requests to a single busy metadata
// server (Lustre MDS, NFS server), and data reads cost a time per MiB on a
// second shared queue. The kernel caches no entries or attributes (timeouts
// 0), as on a shared file system that must revalidate. Operations are counted
// by type; the counts are readable while mounted and resettable.
//
// It owns the FUSE server, its queues and counters; it must not be used
// outside tests and benchmarks, and must not change what it serves.
package slowfs
