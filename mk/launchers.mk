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

# Launcher plugins: srun/sbatch/salloc --dlbundle=IMAGE (a SPANK plugin, C,
# against Slurm's spank.h) and flux run -o dlbundle=IMAGE (a Lua job shell
# plugin, with a C half, launchers/flux/ldso, that make install builds
# against the installed Flux's headers: tasks under an image's ld.so on a
# node of another glibc). Both run `dlbundle env` once per node and step
# and give every task its variables (docs/exec.md, "Which way when").
#
#   make spank     launchers/slurm/spank_dlbundle.so (part of make build)
APT_PACKAGES += libslurm-dev
SPANK_SO := bin/spank_dlbundle.so
.PHONY: spank flux-deps
build: spank
spank: $(SPANK_SO)
$(SPANK_SO): launchers/slurm/spank_dlbundle.c
	@mkdir -p $(dir $@)
	@if [ -f /usr/include/slurm/spank.h ]; then \
	  gcc -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $<; \
	else \
	  echo "make spank: /usr/include/slurm/spank.h is missing (Debian: libslurm-dev; make deps installs it); not building $@" >&2; \
	fi

# Flux (Debian 12 has no flux-core package): the build in ../shared/flux,
# installed into /opt/flux with its runtime packages, after the Debian
# packages (no two apt-get runs at once). Skipped where that folder is not.
FLUX_SHARED ?= $(wildcard ../shared/flux)
deps: flux-deps
flux-deps: deps-packages
	@if [ -n "$(FLUX_SHARED)" ] && [ -f $(FLUX_SHARED)/install.sh ]; then \
	  if [ "$$(id -u)" = 0 ]; then sh $(FLUX_SHARED)/install.sh; \
	  else echo "make deps: run as root to install Flux: sh $(FLUX_SHARED)/install.sh" >&2; fi; \
	else echo "make deps: no ../shared/flux here; the Flux tests use flux from PATH or skip"; fi
