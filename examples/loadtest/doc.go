// Package loadtest generates and builds a C program that loads many shared
// libraries the way large HPC codes do (like LLNL's CLoadtest and Pynamic):
// chains of DT_NEEDED dependencies spread over several directories found
// through RUNPATH, so that the dynamic loader probes many directories per
// library, plus a few plugins opened with dlopen.
//
// Layout of a generated tree:
//
//	app                      the program; RUNPATH $ORIGIN/lib/d0:...:$ORIGIN/plugins
//	lib/dK/libltN.so         library N lives in directory N mod Dirs
//	plugins/libltplugP.so    opened by name with dlopen
//	src/                     the generated C sources
//
// The program calls one function through every library chain and every
// plugin, and prints "loadtest ok <libraries> <plugins> <checksum>".
//
// It must not depend on dlbundle: it is the application, not the tool.
package loadtest
