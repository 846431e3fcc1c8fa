#!/bin/sh
# make install / make uninstall (mk/install.mk): the binary, the Slurm SPANK
# plugin and the Flux job shell plugin, each where the installed software
# looks for it, found by asking that software; a manifest records every file
# written and every line added, so that uninstall removes exactly those.
#
#   mk/install.sh install | uninstall
#
# From the environment (mk/install.mk passes make's variables):
#   PREFIX DESTDIR        as usual; DESTDIR only prefixes what is written
#   BIN SPANK_SO FLUX_LUA what to install (built by make); FLUX_LDSO_C the Flux C
#                         plugin's source (built here against Flux's headers)
#   WITH_SLURM WITH_FLUX  auto (install if found), yes (fail if not found), no
#   SLURM_PLUGINDIR       Slurm's plugin dir (else asked of Slurm)
#   SLURM_PLUGSTACK       Slurm's plugstack.conf (else asked of Slurm)
#   SPANK_ARGS            more words for the plugstack line, e.g. stage_dir=/local/dlbundle
#   FLUX                  the flux command (else flux on PATH, else /opt/flux/bin/flux)
#   FLUX_LUAD             the job shell's lua.d (else asked of flux)
#   FLUX_INCLUDE          Flux's headers (else <flux prefix>/include)
set -eu

PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
WITH_SLURM=${WITH_SLURM:-auto}
WITH_FLUX=${WITH_FLUX:-auto}
MANIFEST=$DESTDIR$PREFIX/share/dlbundle/install-manifest

die() { echo "make $action: $*" >&2; exit 1; }
say() { printf '%s\n' "$*"; }

# The manifest's lines: "file PATH", "dir PATH" (created by install, removed
# if empty), "line PATH<TAB>TEXT" (a line appended to a file that was there).
record() { printf '%s\n' "$*" >> "$MANIFEST.new"; }

# mkdirs DIR: creates DIR and its missing parents, recording each it created.
mkdirs() {
	[ -d "$1" ] && return 0
	mkdirs "$(dirname "$1")"
	mkdir "$1"
	record "dir $1"
}

# put SRC DST MODE: installs a file, recording it.
put() {
	mkdirs "$(dirname "$2")"
	cp -f "$1" "$2.dlbundle-new"
	chmod "$3" "$2.dlbundle-new"
	mv -f "$2.dlbundle-new" "$2"
	record "file $2"
}

# slurm_config KEY: KEY's value as the running Slurm reports it (scontrol show
# config), else as slurm.conf sets it; empty if neither says.
slurm_config() {
	v=""
	if command -v scontrol >/dev/null 2>&1; then
		# A bounded wait: with slurmctld down scontrol retries.
		v=$(timeout 30 scontrol show config 2>/dev/null | sed -n "s/^$1 *= *//p" | head -n1)
	fi
	if [ -z "$v" ]; then
		conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
		[ -r "$conf" ] && v=$(sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/Ip" "$conf" | tail -n1)
	fi
	case $v in "(null)") v="" ;; esac
	printf '%s' "$v"
}

# slurm_plugindir: Slurm's plugin dir: its configuration's PluginDir (the
# first, if a list), else the directory next to libslurm that holds Slurm's
# own plugins (Debian: <libdir>/slurm-wlm; a source build: <libdir>/slurm).
slurm_plugindir() {
	d=$(slurm_config PluginDir)
	if [ -n "$d" ]; then printf '%s' "${d%%:*}"; return; fi
	libs=""
	if command -v pkg-config >/dev/null 2>&1; then libs=$(pkg-config --variable=libdir slurm 2>/dev/null || true); fi
	libs="$libs $(ldconfig -p 2>/dev/null | sed -n 's/.*libslurm\.so.* => \(.*\)\/[^/]*$/\1/p' | sort -u)"
	for l in $libs; do
		l=$(readlink -f "$l") # /lib -> /usr/lib where /lib is a link (usrmerge)
		for d in "$l/slurm-wlm" "$l/slurm"; do
			if ls "$d"/select_*.so >/dev/null 2>&1 || ls "$d"/proctrack_*.so >/dev/null 2>&1; then
				printf '%s' "$d"; return
			fi
		done
	done
}

install_slurm() {
	if [ "$WITH_SLURM" = no ]; then say "Slurm plugin: skipped (WITH_SLURM=no)"; return; fi
	plugindir=${SLURM_PLUGINDIR:-$(slurm_plugindir)}
	if [ -z "$plugindir" ]; then
		[ "$WITH_SLURM" = yes ] && die "no Slurm found (neither scontrol show config, slurm.conf nor libslurm names a plugin dir); set SLURM_PLUGINDIR=DIR"
		say "Slurm plugin: skipped (no Slurm found here; SLURM_PLUGINDIR=DIR installs it anyway)"
		return
	fi
	[ -f "$SPANK_SO" ] || die "$SPANK_SO was not built: Slurm's spank.h is missing (Debian: apt-get install libslurm-dev), or set WITH_SLURM=no"
	plugstack=${SLURM_PLUGSTACK:-$(slurm_config PlugStackConfig)}
	if [ -z "$plugstack" ]; then
		conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
		plugstack=$(dirname "$conf")/plugstack.conf
	fi
	so=$plugindir/spank_dlbundle.so
	put "$SPANK_SO" "$DESTDIR$so" 0755
	say "Slurm plugin:    $DESTDIR$so (Slurm's PluginDir)"
	# Its line in plugstack.conf.d, which plugstack.conf includes (Debian's
	# does; a plugstack.conf that does not gets the include line, recorded).
	# "required": a node that cannot load the plugin fails the job instead
	# of running it without --dlbundle.
	confd=$(dirname "$plugstack")/plugstack.conf.d
	line="required $so dlbundle=$PREFIX/bin/dlbundle${SPANK_ARGS:+ $SPANK_ARGS}"
	mkdirs "$DESTDIR$confd"
	printf '# dlbundle: srun/sbatch/salloc --dlbundle=IMAGE (make install; docs/install.md)\n%s\n' "$line" > "$DESTDIR$confd/dlbundle.conf.dlbundle-new"
	chmod 0644 "$DESTDIR$confd/dlbundle.conf.dlbundle-new"
	mv -f "$DESTDIR$confd/dlbundle.conf.dlbundle-new" "$DESTDIR$confd/dlbundle.conf"
	record "file $DESTDIR$confd/dlbundle.conf"
	say "Slurm plugstack: $DESTDIR$confd/dlbundle.conf: $line"
	include="include $confd/*.conf"
	ps=$DESTDIR$plugstack
	if [ -f "$ps" ] && grep -q "^[[:space:]]*include[[:space:]]\{1,\}$confd/" "$ps"; then
		say "Slurm plugstack: $ps already includes $confd"
		# A line a previous install added stays recorded.
		[ -f "$MANIFEST" ] && grep -F "line $ps	" "$MANIFEST" >> "$MANIFEST.new" || true
	elif [ -f "$ps" ]; then
		printf '%s\n' "$include" >> "$ps"
		record "line $ps	$include"
		say "Slurm plugstack: $ps: added \"$include\""
	else
		mkdirs "$(dirname "$ps")"
		printf '%s\n' "$include" > "$ps"
		record "file $ps"
		say "Slurm plugstack: $ps (new): $include"
	fi
}

# flux_luad: the job shell's lua.d, asked of flux: inside an instance the
# instance's own initrc (broker attribute conf.shell_initrc), else the
# initrc flux was built with; lua.d is beside it (initrc.lua sources
# lua.d/*.lua from its own directory).
flux_luad() {
	initrc=""
	if [ -n "${FLUX_URI:-}" ]; then initrc=$("$1" getattr conf.shell_initrc 2>/dev/null || true); fi
	[ -n "$initrc" ] || initrc=$("$1" config builtin shell_initrc 2>/dev/null || true)
	[ -n "$initrc" ] && printf '%s/lua.d' "$(dirname "$initrc")"
}

install_flux() {
	if [ "$WITH_FLUX" = no ]; then say "Flux plugin: skipped (WITH_FLUX=no)"; return; fi
	luad=${FLUX_LUAD:-}
	if [ -z "$luad" ]; then
		flux=${FLUX:-$(command -v flux || true)}
		if [ -z "$flux" ] && [ -x /opt/flux/bin/flux ]; then flux=/opt/flux/bin/flux; fi
		if [ -z "$flux" ]; then
			[ "$WITH_FLUX" = yes ] && die "no flux found (PATH, /opt/flux/bin); set FLUX=/path/to/flux or FLUX_LUAD=DIR"
			say "Flux plugin: skipped (no flux found here; FLUX=/path/to/flux or FLUX_LUAD=DIR installs it anyway)"
			return
		fi
		luad=$(flux_luad "$flux")
		[ -n "$luad" ] || die "$flux config builtin shell_initrc said nothing: set FLUX_LUAD=<the job shell's lua.d>"
	fi
	put "$FLUX_LUA" "$DESTDIR$luad/dlbundle.lua" 0644
	say "Flux plugin:     $DESTDIR$luad/dlbundle.lua (the job shell's lua.d)"
	# Its C half, which dlbundle.lua loads from beside itself: on a node of
	# another glibc than an image's, it starts the tasks under the image's
	# ld.so (the Lua API cannot change a task's command). Built here against
	# the installed Flux's own headers (<flux prefix>/include).
	flux=${flux:-${FLUX:-$(command -v flux || true)}}
	if [ -z "$flux" ] && [ -x /opt/flux/bin/flux ]; then flux=/opt/flux/bin/flux; fi
	inc=${FLUX_INCLUDE:-}
	if [ -z "$inc" ] && [ -n "$flux" ]; then inc=$(dirname "$(dirname "$flux")")/include; fi
	if [ -n "$inc" ] && [ -f "$inc/flux/shell.h" ]; then
		so=$(mktemp)
		${CC:-cc} -std=gnu11 -O2 -fPIC -shared -I "$inc" -o "$so" "${FLUX_LDSO_C:-launchers/flux/ldso/dlbundle_ldso.c}" ||
			{ rm -f "$so"; die "cc ${FLUX_LDSO_C:-launchers/flux/ldso/dlbundle_ldso.c} failed (against $inc/flux/shell.h)"; }
		put "$so" "$DESTDIR$luad/dlbundle_ldso.so" 0644
		rm -f "$so"
		say "Flux plugin:     $DESTDIR$luad/dlbundle_ldso.so (tasks under an image's ld.so on a node of another glibc)"
	else
		say "Flux plugin:     dlbundle_ldso.so skipped (no flux/shell.h under ${inc:-<flux prefix>/include}; FLUX_INCLUDE=DIR): on a node of another glibc than an image's, tasks run under the node's ld.so"
	fi
}

do_install() {
	[ -f "$BIN" ] || die "$BIN was not built"
	# The manifest's own directories, recorded once it exists.
	made=""
	d=$(dirname "$MANIFEST")
	while [ ! -d "$d" ]; do made="$d $made"; d=$(dirname "$d"); done
	mkdir -p "$(dirname "$MANIFEST")"
	: > "$MANIFEST.new"
	for d in $made; do record "dir $d"; done
	# Every entry of an earlier install stays listed until uninstall.
	[ -f "$MANIFEST" ] && grep -v "^line " "$MANIFEST" >> "$MANIFEST.new" || true
	put "$BIN" "$DESTDIR$PREFIX/bin/dlbundle" 0755
	say "dlbundle:        $DESTDIR$PREFIX/bin/dlbundle"
	install_slurm
	install_flux
	record "file $MANIFEST"
	awk '!seen[$0]++' "$MANIFEST.new" > "$MANIFEST"
	rm -f "$MANIFEST.new"
	say "manifest:        $MANIFEST (make uninstall PREFIX=$PREFIX${DESTDIR:+ DESTDIR=$DESTDIR} removes what it lists)"
}

do_uninstall() {
	[ -f "$MANIFEST" ] || die "no $MANIFEST: nothing installed with PREFIX=$PREFIX${DESTDIR:+ DESTDIR=$DESTDIR}"
	# Last written first: files before the directories made for them; the
	# manifest itself before its directory.
	rev=$(mktemp)
	tac "$MANIFEST" > "$rev"
	rm -f "$MANIFEST"
	while IFS= read -r entry; do
		kind=${entry%% *}
		rest=${entry#* }
		case $kind in
		file)
			[ "$rest" = "$MANIFEST" ] && continue
			rm -f "$rest" && say "removed $rest" ;;
		dir)
			if rmdir "$rest" 2>/dev/null; then say "removed $rest/"; fi ;;
		line)
			f=${rest%%	*}
			text=${rest#*	}
			if [ -f "$f" ]; then
				# In place (cat >): the file keeps its owner and mode.
				L=$text awk '$0 != ENVIRON["L"]' "$f" > "$f.dlbundle-new" && cat "$f.dlbundle-new" > "$f" && rm -f "$f.dlbundle-new"
				say "removed \"$text\" from $f"
			fi ;;
		esac
	done < "$rev"
	rm -f "$rev"
}

action=${1:-}
case $action in
install) do_install ;;
uninstall) do_uninstall ;;
*) echo "usage: $0 install|uninstall" >&2; exit 2 ;;
esac
