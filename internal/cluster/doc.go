// Package cluster starts a real Slurm cluster on this machine for tests:
// munged, slurmctld and K slurmd as fake nodes, without systemd.
//
// Every slurmd runs in its own mount namespace with a private tmpfs on
// /dev/shm and /tmp, so each fake node stages images on its own, as a real
// node would; Prolog, Epilog and job steps started by a slurmd run in its
// namespace. Everything lives in one temporary directory outside /tmp (the
// nodes' /tmp is private): the config, munge's key and socket, spool dirs,
// logs, and Shared, which stands for the parallel file system that every
// node sees. A test looks into a node with OnNode (the node's mount
// namespace and its slurmd's root directory, so that it works as well from
// a chroot as on a machine). Ports are chosen at run time. Stop ends only
// the processes Start started. The system's own munge and slurm services
// (if any) are neither used nor touched.
//
// Prerequisites (Debian 12): root, and the packages slurm-wlm, munge,
// openmpi-bin, libpmix-bin (make deps installs them).
package cluster
