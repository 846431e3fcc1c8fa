package report

import "os"

func Load(p string) ([]byte, error) {
	return os.ReadFile(p) // want `report.go:\d+: os.ReadFile of a non-constant path in report.Load`
}
