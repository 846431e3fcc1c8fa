// Package units formats quantities for people: byte counts in the summaries
// and progress lines of the CLI and the tracer. It owns nothing else.
package units

import "fmt"

// Bytes formats n as B, KiB, MiB or GiB (binary prefixes, one decimal).
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
