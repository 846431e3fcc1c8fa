package trace

import "testing"

// TestLauncherRankNearest: the rank comes from the launcher nearest the
// process. Environments as the launchers set them (seen on Slurm 22.05 and
// Open MPI 4.1): mpirun inside sbatch passes its ranks the batch step's
// SLURM_PROCID=0, which used to win and sent every rank's trace to T.0.
func TestLauncherRankNearest(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"srun", map[string]string{"SLURM_PROCID": "3", "SLURM_JOB_ID": "7"}, "3"},
		{"srun --mpi=pmix", map[string]string{"SLURM_PROCID": "3", "PMIX_RANK": "3"}, "3"},
		{"mpirun inside sbatch", map[string]string{"SLURM_PROCID": "0", "OMPI_COMM_WORLD_RANK": "1", "PMIX_RANK": "1"}, "1"},
		{"prterun inside sbatch", map[string]string{"SLURM_PROCID": "0", "PMIX_RANK": "2"}, "2"},
		{"mpich hydra inside sbatch", map[string]string{"SLURM_PROCID": "0", "PMI_RANK": "4"}, "4"},
		{"flux", map[string]string{"FLUX_TASK_RANK": "5"}, "5"},
		{"none", map[string]string{}, ""},
	} {
		if got := LauncherRank(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%s: rank %q, want %q", c.name, got, c.want)
		}
	}
}
