// Package ldcache reads /etc/ld.so.cache as glibc's ld.so reads it (elf/dl-cache.c:
// the new format, "glibc-ld.so.cache1.1", alone or after the old one). The
// shim's C reader is loader/shim/ldcache.h; Lookup is its binary search
// written again, for staging (loader/stagefmt: the answers a stage keeps),
// and the cgo tests in loader/shim/fuzz hold the two to the same answers.
package ldcache
