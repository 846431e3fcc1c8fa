package benchhost

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine names the kernel, the core count and the CPU model.
func Machine() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	cpu := "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(info), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("Linux %s, %d CPUs (%s)", strings.TrimSpace(string(kernel)), runtime.NumCPU(), cpu)
}

// LoadAvg is /proc/loadavg's first three numbers ("?" where unreadable).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
