// Package squash turns one or more pilot traces into a load plan: the ordered
// list of image entries (regular files, directories with listings, symlinks,
// known-missing paths) that `dlbundle build` packs.
//
// It owns the bundling policy (what is skipped, what is volatile, /etc and
// pseudo file systems) and the check that sources did not change since the
// pilot. It must not write images (package image) nor run programs.
package squash
