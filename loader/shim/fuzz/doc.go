// Package shimfuzz fuzzes the shim's C code that reads untrusted input: the
// lookup table reader and path resolver (loader/shim/table.h), the report
// line writer (loader/shim/reportfmt.h) and the ld.so.cache reader
// (loader/shim/ldcache.h), called through cgo. It is a test harness only;
// its make target (fuzz-shim in mk/loader.mk) sets CGO_ENABLED=1 and -asan,
// so the C code runs under AddressSanitizer. With
// CGO_ENABLED=0 (the Makefile's default) the package holds nothing to test.
package shimfuzz
