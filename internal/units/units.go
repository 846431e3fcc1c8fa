// Package units formats quantities for people: byte counts and counts with
// thousands separators in the summaries, reports and pages of the CLI, the
// tracer and the benchmarks. It owns nothing else.
package units

import (
	"fmt"
	"strconv"
)

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

// Count formats n with a comma between each group of three digits: 3,421.
func Count[T ~int | ~int32 | ~int64](n T) string {
	d := strconv.FormatInt(int64(n), 10)
	sign := ""
	if d[0] == '-' {
		sign, d = "-", d[1:]
	}
	for i := len(d) - 3; i > 0; i -= 3 {
		d = d[:i] + "," + d[i:]
	}
	return sign + d
}
