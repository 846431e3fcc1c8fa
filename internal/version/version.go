// Package version holds the dlbundle version string, stamped at link time by
// the Makefile (-ldflags -X) and recorded in every trace and image header.
package version

// Version is the dlbundle release; "dev" for a build outside the Makefile.
var Version = "dev"
