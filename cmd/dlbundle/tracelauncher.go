package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// launchers start an app's ranks through daemons (slurmd, orted, prted,
// hydra proxies, flux brokers), not as children: tracing the launcher records
// the launcher, never the app.
var launchers = map[string]string{
	"srun": "srun", "mpirun": "mpirun", "mpiexec": "mpiexec", "orterun": "mpirun",
	"prterun": "prterun", "mpiexec.hydra": "mpiexec", "aprun": "aprun", "jsrun": "jsrun",
	"flux": "flux run", "ibrun": "ibrun",
}

// refuseLauncher refuses `dlbundle trace -- srun ...`, which would silently
// trace srun alone, and names the recipe that traces the ranks.
func refuseLauncher(argv []string) error {
	if len(argv) == 0 {
		return nil
	}
	name := filepath.Base(argv[0])
	l, ok := launchers[name]
	if !ok {
		return nil
	}
	rest := argv[1:]
	// The launcher's own options come before the app; keep them in the recipe.
	app := "./app"
	if n := len(rest); n > 0 {
		app = strings.Join(rest, " ")
	}
	opts := ""
	if i := firstNonOption(rest); i >= 0 {
		opts = strings.Join(rest[:i], " ")
		app = strings.Join(rest[i:], " ")
	}
	if opts != "" {
		opts += " "
	}
	if name == "flux" && len(rest) > 0 {
		l = "flux " + rest[0]
		opts = ""
		if i := firstNonOption(rest[1:]); i >= 0 {
			if o := strings.Join(rest[1:1+i], " "); o != "" {
				opts = o + " "
			}
			app = strings.Join(rest[1+i:], " ")
		}
	}
	return fmt.Errorf("%s starts the ranks through its daemons, so tracing it would record %s only, not the app; "+
		"put the launcher outside: %s %sdlbundle trace -- %s (each rank writes dlbundle.trace.RANK; "+
		"one rank is usually enough: %s -n 1 dlbundle trace -- ...)", name, name, l, opts, app, l)
}

// firstNonOption returns the index of the first argument that does not look
// like a launcher option or its value ("-n 4", "--ntasks=4"), or -1. A value
// is recognised only for the short options that take one; it is a guess made
// for a message.
func firstNonOption(args []string) int {
	takesValue := map[string]bool{"-n": true, "-N": true, "-np": true, "-c": true, "-p": true, "-t": true,
		"-w": true, "-x": true, "-A": true, "-J": true, "-o": true, "-e": true, "--host": true, "-H": true,
		"--hostfile": true, "--map-by": true, "--bind-to": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--mca" || a == "-mca":
			i += 2 // --mca NAME VALUE
		case takesValue[a]:
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return i
		}
	}
	return -1
}
