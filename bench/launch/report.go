package launch

import (
	"fmt"
	"io"
	"time"
)

// Markdown writes the results as the section of docs/benchmarks.md.
func (r *Results) Markdown(w io.Writer) {
	o := r.Opts
	fmt.Fprintf(w, "Measured %s on %s: %d fake Slurm nodes x %d ranks (srun, Slurm 22.05), the loadtest app "+
		"(%d libraries, %d files) on slowfs (metadata %v per operation on one queue, data %v per MiB); "+
		"image %.1f MiB; median of %d runs.\n\n",
		r.Date, r.Machine, o.Nodes, o.Ranks, o.Loadtest.Libs, r.AppFiles, o.Costs.Metadata, o.Costs.ReadPerMiB,
		float64(r.ImageBytes)/(1<<20), o.Runs)
	fmt.Fprintf(w, "| mode | metadata ops / job | MiB read / job | job step (last rank) | ops at %d nodes | GiB at %d nodes | metadata server busy at %d nodes | data path busy at %d nodes |\n",
		projectNode, projectNode, projectNode, projectNode)
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Rows {
		ops, bytes := row.At(projectNode)
		meta := time.Duration(ops * float64(o.Costs.Metadata))
		data := time.Duration(bytes / (1 << 20) * float64(o.Costs.ReadPerMiB))
		fmt.Fprintf(w, "| %s | %d | %.1f | %v | %.0f | %.1f | %v | %v |\n", row.Mode, row.MetaOps, float64(row.Bytes)/(1<<20),
			row.Time.Round(time.Millisecond), ops, bytes/(1<<30), meta.Round(time.Millisecond), data.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\nProjection: each mode ran on 1 node and on %d; the difference is what every further node adds, "+
		"the rest is paid once per job (e.g. sbcast's one read of the image). At %d nodes: fixed + %d x per node. "+
		"Bytes: the fake nodes share one page cache, so a mode whose bytes grow with the nodes is projected with "+
		"what ONE node reads (a real node reads the whole image or app itself). "+
		"Busy times are operations times the service times above, on one metadata queue and one data queue "+
		"(one MDS, one OST: a wide stripe divides the data time). Times on this machine are noisy (2 CPUs shared); "+
		"operation and byte counts are exact.\n\n", o.Nodes, projectNode, projectNode)
	fmt.Fprintf(w, "| mode | fixed ops / job | ops / node | fixed MiB / job | MiB / node |\n|---|---:|---:|---:|---:|\n")
	for _, row := range r.Rows {
		fmt.Fprintf(w, "| %s | %d | %.0f | %.2f | %.2f |\n", row.Mode, row.FixedOps, row.OpsPerNode,
			float64(row.FixedBytes)/(1<<20), row.BytesPerNode/(1<<20))
	}
}
