// Command gen builds the loadtest program: a C program with many shared
// libraries in DT_NEEDED chains across RUNPATH directories, plus dlopen'ed
// plugins. Example, the shape of the seed's CLoadtest (710 libraries, ~32 MiB):
//
//	go run ./examples/loadtest/gen -o /tmp/lt -libs 710 -data-kib 40
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/dlbundle/dlbundle/examples/loadtest"
)

func main() {
	c := loadtest.Default()
	flag.StringVar(&c.OutputDir, "o", "", "output directory (required)")
	flag.IntVar(&c.Libs, "libs", c.Libs, "shared libraries linked at start-up")
	flag.IntVar(&c.Dirs, "dirs", c.Dirs, "directories the libraries are spread over (RUNPATH entries)")
	flag.IntVar(&c.ChainLen, "chain", c.ChainLen, "libraries per DT_NEEDED chain")
	flag.IntVar(&c.Plugins, "plugins", c.Plugins, "plugins opened with dlopen")
	flag.IntVar(&c.Funcs, "funcs", c.Funcs, "exported functions per library")
	flag.IntVar(&c.DataKiB, "data-kib", c.DataKiB, "read-only data per library, KiB")
	flag.IntVar(&c.Jobs, "j", 0, "parallel compiler runs (default: number of CPUs)")
	flag.StringVar(&c.CC, "cc", c.CC, "C compiler")
	flag.Parse()
	if c.OutputDir == "" {
		fmt.Fprintln(os.Stderr, "gen: -o DIR is required (where to build the program)")
		flag.Usage()
		os.Exit(2)
	}
	start := time.Now()
	app, err := loadtest.Build(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("built %s: %d libraries in %d directories, %d plugins, in %v\n", app, c.Libs, c.Dirs, c.Plugins, time.Since(start).Round(time.Millisecond))
}
