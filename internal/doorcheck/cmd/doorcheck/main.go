// Command doorcheck runs the doorcheck analyzer (see internal/doorcheck):
// `make check-door` runs it on ./... and fails on a finding.
package main

import (
	"github.com/dlbundle/dlbundle/internal/doorcheck"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(doorcheck.Analyzer) }
