// Package trustpath is dlbundle's one rule for whose path may be used, and
// the one walker that applies it.
//
// Every path dlbundle opens or creates on someone's behalf (an image file,
// the stage dir and its parents, extract's target, trace, page and build
// outputs) may have been prepared by another user of the node: /tmp and
// /dev/shm let anyone create any name, and job scripts use predictable
// names there (/tmp/$USER, /tmp/$SLURM_JOB_ID). The walker (walk.go) goes
// down the path from / one component at a time with *at calls on
// descriptors, never resolving a name twice, and asks this file's rule about
// every entry it meets before it enters, follows or returns it.
//
// The rule (OpenSSH's StrictModes, sharpened for shared directories):
//
//  1. In a directory that every user can write and that is not sticky,
//     nothing is trusted: anyone can rename or replace any entry.
//  2. In a directory that every user can write and that is sticky (/tmp,
//     /dev/shm), an entry is trusted only if the caller, root or the
//     directory's owner made it. A directory another user made there is
//     theirs, whoever owns what lies below it: a victim's `mkdir -p
//     /tmp/jobs` succeeds on the attacker's /tmp/jobs, and the victim's
//     own file copied into it could be swapped by the attacker.
//  3. Anywhere else the entry is trusted: the directory's owner (and group)
//     decide what is in it, and using a colleague's project directory means
//     trusting that colleague and the directory's group.
//  4. Below an entry that is not trusted nothing is trusted: the walk stops
//     at the first one.
//
// Write adds one check, for paths dlbundle writes below (extract's target,
// outputs): a symbolic link on the way is followed only if root or the
// caller owns it, since it decides where the writing goes.
//
// Private adds StrictModes' own check, for directories the caller will load
// code from (the stage dir): every directory on the way and every symbolic
// link followed is root's or the caller's, and no directory on the way is
// writable by group or others unless it is sticky.
//
// / itself is never looked at: an image bundles /, staging must make no call
// on a bundled path, and whoever can write / owns the node anyway.
package trustpath

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Rule says how strict a walk is.
type Rule int

const (
	// Shared: rules 1-4. For files the caller reads (images) and for where
	// it writes its outputs.
	Shared Rule = iota
	// Write: Shared, and every symbolic link followed is root's or the
	// caller's. For where dlbundle writes (extract's target, outputs).
	Write
	// Private: Shared, and every directory on the way and every symbolic
	// link followed is root's or the caller's, no directory on the way
	// writable by group or others unless sticky. For the stage dir.
	Private
)

// Node is what the rule needs to know of a file, from fstat on the
// descriptor that is used.
type Node struct {
	Mode     uint32 // type and permission bits (st_mode)
	Uid      uint32
	Dev, Ino uint64
}

// Type returns the file type bits.
func (n Node) Type() uint32 { return n.Mode & unix.S_IFMT }

// NodeOf converts a stat result.
func NodeOf(st *unix.Stat_t) Node {
	return Node{Mode: st.Mode, Uid: st.Uid, Dev: st.Dev, Ino: st.Ino}
}

// rootNode stands for / (never stat'ed: see the package comment).
var rootNode = Node{Mode: unix.S_IFDIR | 0o755}

func worldWritable(n Node) bool { return n.Mode&0o002 != 0 }
func sticky(n Node) bool        { return n.Mode&unix.S_ISVTX != 0 }

// Verdict applies the rule to child, an entry of directory dir, for the
// caller uid: "" if it may be used (entered, followed, opened), else why
// not, as a clause that follows the entry's path in a message ("<path>,
// <why>").
func (r Rule) Verdict(uid uint32, dirPath string, dir, child Node) string {
	switch {
	case worldWritable(dir) && !sticky(dir):
		return fmt.Sprintf("which lies in %s, a directory every user can write and that is not sticky (mode %#o): anyone could have put it there or swap it",
			dirPath, dir.Mode&0o7777)
	case worldWritable(dir) && child.Uid != uid && child.Uid != 0 && child.Uid != dir.Uid:
		if child.Type() == unix.S_IFLNK {
			return fmt.Sprintf("a symbolic link of uid %d in %s, which every user can write: anyone could have pointed it elsewhere",
				child.Uid, dirPath)
		}
		return fmt.Sprintf("owned by uid %d and lies in %s, which every user can write (mode %#o): another user made it there, so neither it nor anything below it is trusted (uid %d)",
			child.Uid, dirPath, dir.Mode&0o7777, uid)
	}
	if r == Write && child.Type() == unix.S_IFLNK && child.Uid != 0 && child.Uid != uid {
		return fmt.Sprintf("a symbolic link that belongs to uid %d: only root's or uid %d's links are followed on the way to where dlbundle writes (a link decides where that is)", child.Uid, uid)
	}
	if r != Private {
		return ""
	}
	switch child.Type() {
	case unix.S_IFLNK:
		if child.Uid != 0 && child.Uid != uid {
			return fmt.Sprintf("a symbolic link owned by uid %d (only root or uid %d may own a link on the way: it decides where the path leads)", child.Uid, uid)
		}
	case unix.S_IFDIR:
		if child.Uid != 0 && child.Uid != uid {
			return fmt.Sprintf("which is owned by uid %d (only root or uid %d may own the directories on the way)", child.Uid, uid)
		}
		if child.Mode&0o022 != 0 && !sticky(child) {
			return fmt.Sprintf("which has mode %#o (writable by others and not sticky: they could swap what lies below)", child.Mode&0o7777)
		}
	}
	return ""
}

// Error is a refusal by the rule: Path was asked for, At is the entry that
// is not trusted (its path with symlinks resolved), Why the rule's clause.
type Error struct {
	Path, At, Why string
}

// Error says what is not trusted and why; the caller says what it refuses
// to do and what to do instead.
func (e *Error) Error() string {
	if e.At == e.Path {
		return fmt.Sprintf("%s, %s", e.Path, e.Why)
	}
	return fmt.Sprintf("%s goes through %s, %s", e.Path, e.At, e.Why)
}
