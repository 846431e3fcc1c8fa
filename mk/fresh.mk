# make fresh: the README's set-up (make deps, then make; make test with
# FRESH_TEST=1) in a clean Debian 12 chroot from a clone of HEAD (mk/fresh.sh:
# root, ~45 min, ~7 GB in /var/tmp/dlbundle-fresh). Not part of make test:
# run it after changing make deps, the README's set-up or go.mod's go line.
.PHONY: fresh
fresh:
	sh mk/fresh.sh
