package main

import (
	"strings"
	"testing"
)

// TestTraceRefusesLauncher: `dlbundle trace -- srun ...` used to trace srun
// alone and write a trace without the app; it is refused with the recipe
// that puts the launcher outside.
func TestTraceRefusesLauncher(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"srun", "-n", "2", "python3", "app.py"}, "srun -n 2 dlbundle trace -- python3 app.py"},
		{[]string{"/usr/bin/mpirun", "-np", "4", "--mca", "btl", "self,tcp", "./app", "-x"}, "mpirun -np 4 --mca btl self,tcp dlbundle trace -- ./app -x"},
		{[]string{"mpiexec", "./app"}, "mpiexec dlbundle trace -- ./app"},
		{[]string{"orterun", "--oversubscribe", "./app"}, "mpirun --oversubscribe dlbundle trace -- ./app"},
		{[]string{"flux", "run", "-n2", "./app"}, "flux run -n2 dlbundle trace -- ./app"},
	} {
		err := refuseLauncher(c.argv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want the recipe %q", c.argv, err, c.want)
		}
	}
	for _, argv := range [][]string{{"./app"}, {"/usr/bin/python3", "srun"}, {"sruntime"}, {}} {
		if err := refuseLauncher(argv); err != nil {
			t.Errorf("%q refused: %v", argv, err)
		}
	}
}
