# Launchers: a real Slurm cluster (munge, slurmctld, slurmd as fake nodes) and
# Open MPI in the test suite (internal/cluster), the examples/jobs scripts.
APT_PACKAGES += slurm-wlm munge openmpi-bin libopenmpi-dev libpmix-bin util-linux
