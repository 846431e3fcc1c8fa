# Launchers: a real Slurm cluster (munge, slurmctld, slurmd as fake nodes) and
# Open MPI in the test suite (internal/cluster), the examples/jobs scripts.
APT_PACKAGES += slurm-wlm munge openmpi-bin libopenmpi-dev libpmix-bin util-linux

# Start-up at width through real srun on fake nodes: native vs dlbundle vs
# dlbundle+sbcast (bench/launch); writes docs/bench/launch.md. About 2 minutes.
BENCH_TARGETS += bench-launch
LAUNCH_FLAGS ?=

.PHONY: bench-launch
bench-launch: build
	CGO_ENABLED=0 $(GO) run ./bench/cmd/launch --out docs/bench --dlbundle $(BIN) $(LAUNCH_FLAGS)
