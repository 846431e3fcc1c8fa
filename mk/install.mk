# make install / make uninstall: bin/dlbundle into $(PREFIX)/bin, the Slurm
# SPANK plugin into the installed Slurm's own plugin dir with its line in
# plugstack.conf.d, the Flux job shell plugin into the installed Flux's
# lua.d; each place asked of the software itself (mk/install.sh; docs/install.md).
# A manifest, $(PREFIX)/share/dlbundle/install-manifest, lists what install
# wrote, and uninstall removes exactly that. Run as root for the system's
# Slurm and Flux; no daemon needs a restart (srun and each step's
# slurmstepd read plugstack.conf when they start, a Flux job shell its lua.d).
#
#   make install [PREFIX=/usr/local] [DESTDIR=] [WITH_SLURM=auto|yes|no] [WITH_FLUX=auto|yes|no]
#                [SLURM_PLUGINDIR=DIR] [SLURM_PLUGSTACK=FILE] [SPANK_ARGS='stage_dir=DIR ...']
#                [FLUX=/path/to/flux] [FLUX_LUAD=DIR]
#   make uninstall [PREFIX=...] [DESTDIR=...]
PREFIX     ?= /usr/local
DESTDIR    ?=
WITH_SLURM ?= auto
WITH_FLUX  ?= auto
INSTALL_VARS = PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' BIN='$(BIN)' SPANK_SO=bin/spank_dlbundle.so \
  FLUX_LUA=launchers/flux/dlbundle.lua FLUX_LDSO_C=launchers/flux/ldso/dlbundle_ldso.c WITH_SLURM='$(WITH_SLURM)' WITH_FLUX='$(WITH_FLUX)' \
  SLURM_PLUGINDIR='$(SLURM_PLUGINDIR)' SLURM_PLUGSTACK='$(SLURM_PLUGSTACK)' SPANK_ARGS='$(SPANK_ARGS)' \
  FLUX='$(FLUX)' FLUX_LUAD='$(FLUX_LUAD)'

.PHONY: install uninstall
# Only what is installed: this machine's binary and the plugin, not every
# architecture's (make build). Names, not variables: mk/launchers.mk, which
# sets SPANK_SO, is read after this file.
install: bin/dlbundle bin/spank_dlbundle.so
	@$(INSTALL_VARS) sh mk/install.sh install
uninstall:
	@$(INSTALL_VARS) sh mk/install.sh uninstall
