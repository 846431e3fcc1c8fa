// Package launch is the benchmark at width through a real launcher: K fake
// Slurm nodes (internal/cluster) x M ranks started by srun from a shared file
// system served by slowfs, natively, through dlbundle exec (every node reads
// the image) and through dlbundle with sbcast (the job reads the image once).
// It counts the metadata operations and bytes on the shared file system per
// job, times the job step from the batch script, and projects to 1,000
// nodes.
//
// It drives dlbundle only through its command line and must not import the
// packages it measures.
package launch
