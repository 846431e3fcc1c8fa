package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// spankBuilt says why the SPANK plugin could not be built ("" if it was).
var spankBuilt = "not built"

// envRuns is the file, in every node's private /tmp, where the wrapper that
// the plugin runs as dlbundle notes each run (job.step), so that tests can
// count the stagings of a step per node.
const envRuns = "/tmp/dlbundle-env-runs"

// spankPlugin builds launchers/slurm/spank_dlbundle.c into tools and writes
// a plugstack.conf that loads it for every srun, with dlbundle= naming a
// wrapper that counts its runs. Without spank.h (libslurm-dev) it returns
// "" and the plugin's tests fail saying so.
func spankPlugin() (string, error) {
	if _, err := os.Stat("/usr/include/slurm/spank.h"); err != nil {
		spankBuilt = "/usr/include/slurm/spank.h is missing: install libslurm-dev (make deps)"
		return "", nil
	}
	so := filepath.Join(tools, "spank_dlbundle.so")
	if out, err := exec.Command("gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
		"-o", so, "../../launchers/slurm/spank_dlbundle.c").CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc spank_dlbundle.c: %v\n%s", err, out)
	}
	wrapper := filepath.Join(tools, "dlbundle-env-counted")
	body := fmt.Sprintf("#!/bin/sh\necho \"$SLURM_JOB_ID.$SLURM_STEP_ID\" >> %s\nexec %s \"$@\"\n", envRuns, dlb)
	if err := os.WriteFile(wrapper, []byte(body), 0o755); err != nil {
		return "", err
	}
	conf := filepath.Join(tools, "plugstack.conf")
	line := fmt.Sprintf("required %s dlbundle=%s\n", so, wrapper)
	if err := os.WriteFile(conf, []byte(line), 0o644); err != nil {
		return "", err
	}
	spankBuilt = ""
	return conf, nil
}
