package benchhost

import (
	"strconv"
	"strings"
	"testing"
)

// TestLoadAvgAndMachine: on Linux both read /proc; the load is three
// numbers and the machine line names the kernel and the core count.
func TestLoadAvgAndMachine(t *testing.T) {
	f := strings.Fields(LoadAvg())
	if len(f) != 3 {
		t.Fatalf("LoadAvg() = %q, want three numbers", LoadAvg())
	}
	for _, n := range f {
		if _, err := strconv.ParseFloat(n, 64); err != nil {
			t.Errorf("LoadAvg() field %q: %v", n, err)
		}
	}
	if m := Machine(); !strings.HasPrefix(m, "Linux ") || !strings.Contains(m, " CPUs (") {
		t.Errorf("Machine() = %q, want \"Linux <release>, N CPUs (<model>)\"", m)
	}
}
