package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/node"
	"github.com/dlbundle/dlbundle/report"
	"github.com/dlbundle/dlbundle/squash"
)

// ReportCmd summarises DLBUNDLE_REPORT files.
type ReportCmd struct {
	Files    []string `arg:"" optional:"" name:"file" type:"existingfile" help:"Report file(s) written by 'dlbundle exec --report FILE' (or DLBUNDLE_REPORT=FILE): one JSON line per process. Default: this node's records (every exec without --report leaves them beside its stage)."`
	StageDir string   `name:"stage-dir" placeholder:"DIR" env:"DLBUNDLE_STAGE_DIR" help:"With no file: read the records of this stage directory (default: where the Slurm plugin stages, plugstack.conf's stage_dir= (found through SLURM_CONF), when records are there; else exec's default)."`
	RunID    string   `name:"run" placeholder:"ID" help:"With no file: only the records of this run and the runs it names the start of (slurm-77: every run of Slurm job 77; slurm-77.3: its step 3)."`
	All      bool     `help:"List every path and library in each category (default: the 30 most taken)."`
	JSON     bool     `name:"json" help:"Print the summary as one JSON object instead of text: the totals (processes, answered, missing, passed), each list of paths with how many processes took it (lacked, node_local, temporary, per_run, left_out, outside, fallbacks), the runs, the image and report files it was made of, fold_argv: the build --from command that folds what the image lacked into it, as an argv array to run with no shell ([] when nothing), and fold: the same as shell text, single-quoted (\"\" when nothing, or when a name holds control bytes). Lists are [] when empty."`
	Gather   string   `placeholder:"DIR" help:"With --job and no file: copy the job's records from this node into DIR/<job>/<node>.<run>.report instead of summarising them (an Epilog's gather, run as the job's user). DIR and DIR/<job> go through the trust rule: a job dir another user made, or a link at a destination name, is refused, never written through."`
	Job      string   `placeholder:"ID" help:"The job whose records --gather copies (its runs are slurm-<ID> and slurm-<ID>.*)."`
	Node     string   `placeholder:"NAME" help:"The node name --gather puts before each record's name (default: the host name)."`
	Image    string   `placeholder:"IMAGE" type:"existingfile" help:"The image the app ran from: the --include/--exclude it was built with decide which paths build left out by policy (default: build's default rules)."`

	out     io.Writer  // where the summary goes; nil means stdout (tests)
	records *recordSet // the node's records when no file was given
}

// Help explains what the report shows.
func (c *ReportCmd) Help() string {
	return `Every process that runs under 'dlbundle exec' appends one line at exit (or when
killed by SIGTERM, or on abort()): how many lookups the shim answered from the stage,
answered as known missing, and passed through to the file system, with the
passed-through paths and the libraries ld.so loaded from outside the image. Without
--report the lines go to the node's records (<stage dir>/records/<run>.report, one
file per run: a job step, an mpirun; repeated lone execs of one image and command
share one); with no file, this verb reads them, summed per image the runs used: one
summary and one fold command per image.

It totals them (per run when there are several) and lists, most-taken first:
node-local paths by policy (nothing to do); per-run temporary names (/tmp/ompi.*,
/tmp/hsperfdata_*: each run makes its own, nothing to do); other paths in temporary
directories (build leaves them out unless --include names them); the libraries from
outside the image; paths the image holds as external (a rule left them on the file
system: --stat-only-max); and the paths the image lacks (the pilot never saw them).
It ends with the command that folds them into the image with no new pilot:

  dlbundle report                                   # this node's records
  dlbundle report --run slurm-77                    # only job 77's runs
  srun dlbundle exec --report /scratch/run1.report app.dlimg -- ./myapp
  dlbundle report /scratch/run1.report
  dlbundle build -o app.dlimg --from app.dlimg /scratch/run1.report   # as it advises
  dlbundle report --json | jq -r '.lacked[].path'    # for a script

The image decides what was left out by policy: give --image (the node's records
name it themselves). A file that is not a report (a trace, an image) is refused with
exit status 2.`
}

// Run reads the files and prints the summary. The node's records are
// summed per image the runs used (each run's record names its image): one
// summary and one fold command per image, never one that mixes images.
func (c *ReportCmd) Run() error {
	if c.Gather != "" || c.Job != "" {
		return c.gather()
	}
	if len(c.Files) == 0 {
		if err := c.nodeFiles(); err != nil {
			return err
		}
		if c.records != nil {
			defer c.records.dir.Close()
		}
		if groups := c.byImage(); len(groups) > 1 && c.Image == "" {
			out := c.out
			if out == nil {
				out = os.Stdout
			}
			for i, g := range groups {
				if !c.JSON {
					if i > 0 {
						fmt.Fprintln(out)
					}
					img := g.image
					if img == "" {
						img = "an image the records do not name"
					}
					fmt.Fprintf(out, "== %d run(s) from %s ==\n", len(g.files), img)
				}
				sub := *c
				sub.Files = g.files
				sub.out = out
				if err := sub.run(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return c.run()
}

type imageRuns struct {
	image string
	files []string
}

// byImage groups the record files by the image their runs used (as exec
// noted it), in the order of each image's first run.
func (c *ReportCmd) byImage() []imageRuns {
	var groups []imageRuns
	at := map[string]int{}
	for _, f := range c.Files {
		img := ""
		if note, err := c.openNote(strings.TrimSuffix(f, ".report") + ".image"); err == nil {
			b, _ := io.ReadAll(io.LimitReader(note, 64<<10))
			note.Close()
			img = strings.TrimSpace(string(b))
		}
		i, ok := at[img]
		if !ok {
			i = len(groups)
			at[img] = i
			groups = append(groups, imageRuns{image: img})
		}
		groups[i].files = append(groups[i].files, f)
	}
	return groups
}

// run summarises c.Files.
func (c *ReportCmd) run() error {
	s, img, err := c.summary()
	if err != nil {
		return err
	}
	out := c.out
	if out == nil {
		out = os.Stdout
	}
	if c.JSON {
		// What the summary was made of beside its figures, and every list
		// as [] rather than null when empty: jq '.lacked[]' then needs
		// no guard.
		emptyListsNotNull(&s)
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			report.Summary
			Image   string   `json:"image"`
			Reports []string `json:"reports"`
			Fold    string   `json:"fold"`
			Argv    []string `json:"fold_argv"`
		}{s, img, c.Files, s.FoldCommand(), foldArgv(s)})
	}
	limit := 30
	if c.All {
		limit = 0
	}
	return s.WriteText(out, limit)
}

// summary reads c.Files and sums them against the image the runs used
// (returned with the summary).
func (c *ReportCmd) summary() (report.Summary, string, error) {
	for _, name := range c.Files {
		if c.records != nil {
			break // opened in the checked records dir below, as regular files only
		}
		if err := refuseNonReport(name); err != nil {
			return report.Summary{}, "", err
		}
	}
	var all []report.ProcessReport
	bad := 0
	for _, name := range c.Files {
		f, err := c.openReport(name)
		if err != nil {
			return report.Summary{}, "", err
		}
		rs, b, err := report.ReadReports(f)
		f.Close()
		if err != nil {
			return report.Summary{}, "", fmt.Errorf("read report %s: %w", name, err)
		}
		all = append(all, rs...)
		bad += b
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "dlbundle report: skipped %d lines that are not process reports\n", bad)
	}
	if len(all) == 0 {
		return report.Summary{}, "", fmt.Errorf("no process reports in %v; was the app run with 'dlbundle exec --report FILE'?", c.Files)
	}
	// The image the runs used: --image, else the one exec noted beside the
	// node's records. Its build rules tell what it left out by policy, its
	// external entries what a rule left on the file system.
	img := c.Image
	if img == "" {
		img = c.imageOfRuns()
	}
	var im *image.Image
	if img != "" {
		var err error
		if im, err = image.OpenFile(img); err != nil {
			if c.Image != "" {
				return report.Summary{}, "", err
			}
			im = nil // the records' image is gone or moved: build's default rules
		} else {
			defer im.Close()
		}
	}
	rules, err := rulesOf(im, img)
	if err != nil {
		return report.Summary{}, "", err
	}
	s := report.SummarizeWithRules(all, rules)
	s.Fold = &report.FoldAdvice{Image: img, Files: c.Files}
	if im != nil {
		s.SplitLeftOut(func(p string) bool {
			e, ok := im.Lookup(p)
			return ok && e.Type == image.TypeExternal
		})
	}
	return s, img, nil
}

// emptyListsNotNull sets every nil slice field of *v (a struct) to an empty
// slice, so that JSON shows [] for an empty list.
func emptyListsNotNull(v any) {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		if f := rv.Field(i); f.Kind() == reflect.Slice && f.IsNil() && f.CanSet() {
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		}
	}
}

// refuseNonReport ends with a usage error (exit 2) naming what a file that
// is not a report is: a trace, an image, anything else.
func refuseNonReport(name string) error {
	k, err := sniffInput(name)
	switch {
	case err != nil:
		return usageError{fmt.Sprintf("%v; 'dlbundle report' reads the files 'dlbundle exec --report FILE' wrote", err)}
	case k == inputTrace:
		return usageError{fmt.Sprintf("%s is a pilot's trace (written by 'dlbundle trace'), not a process report: build reads it (dlbundle build -o app.dlimg %s); report reads what 'dlbundle exec --report FILE' wrote", name, name)}
	case k == inputImage:
		return usageError{fmt.Sprintf("%s is an image, not a process report: give it as --image %s, with the report files of a run from it", name, name)}
	}
	return nil
}

// foldArgv is the fold as an argv array, [] when there is nothing to fold.
func foldArgv(s report.Summary) []string {
	if a := s.FoldArgv(); a != nil {
		return a
	}
	return []string{}
}

// openReport opens a report file: one the caller named (its own input), or
// one of the node's records, in the records dir that was checked.
func (c *ReportCmd) openReport(name string) (*os.File, error) {
	if c.records != nil {
		return c.records.open(name)
	}
	return os.Open(name)
}

// openNote opens the .image note exec left beside a record: like a record,
// a regular file of the caller's own only (a note names the image the fold
// advice reads and rebuilds, and another user may have planted one).
func (c *ReportCmd) openNote(p string) (*os.File, error) {
	if c.records != nil {
		return c.records.open(p)
	}
	abs, err := abspath.Abs(p)
	if err != nil {
		return nil, err
	}
	f, _, err := trustpath.For(trustpath.Shared).OpenOwn(abs)
	return f, err
}

// nodeFiles sets Files to this node's records (records.go), in the stage
// dir found as staging finds it: the same checks, and the same private
// fallback when another user took the default name.
func (c *ReportCmd) nodeFiles() error {
	var rs *recordSet
	if c.StageDir == "" && os.Getenv(node.StageDirEnv) == "" {
		rs = siteRecords()
	}
	if rs == nil {
		stageDir, squat, found, err := node.LookupStageDirFor(c.StageDir)
		if err != nil {
			return err
		}
		if squat != nil {
			fmt.Fprintf(os.Stderr, "dlbundle report: warning: %s\n", squat.Warning())
		}
		if !found {
			return fmt.Errorf("no records in %s: no app ran here with 'dlbundle exec' (or DLBUNDLE_RECORD=0 was set); give report files, or --stage-dir where exec staged", stageDir)
		}
		if rs, err = nodeRecords(stageDir); err != nil {
			return err
		}
	}
	c.records = rs
	files := rs.files
	if c.RunID != "" {
		id := cleanRunID(c.RunID)
		var keep []string
		for _, f := range files {
			if b := filepath.Base(f); b == id+".report" || strings.HasPrefix(b, id+".") {
				keep = append(keep, f)
			}
		}
		if len(keep) == 0 {
			return fmt.Errorf("no record of run %s in %s", c.RunID, filepath.Dir(files[0]))
		}
		files = keep
	}
	c.Files = files
	return nil
}

// siteRecords are the records where the Slurm plugin stages for the site
// (plugstack.conf's stage_dir=), found and checked as staging finds its
// stage dir; nil when the site set none or no records are there.
func siteRecords() *recordSet {
	site := slurmSiteStageDir()
	if site == "" {
		return nil
	}
	dir, squat, found, err := node.LookupStageDirFor(site)
	if err != nil || !found {
		return nil
	}
	rs, err := nodeRecords(dir)
	if err != nil {
		return nil
	}
	if squat != nil {
		fmt.Fprintf(os.Stderr, "dlbundle report: warning: %s\n", squat.Warning())
	}
	return rs
}

// imageOfRuns is the image the records' runs used, as exec noted it beside
// them (records.go), when they all used the same; else "".
func (c *ReportCmd) imageOfRuns() string {
	img := ""
	for _, f := range c.Files {
		note, err := c.openNote(strings.TrimSuffix(f, ".report") + ".image")
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(os.Stderr, "dlbundle report: warning: the image note: %v\n", err)
			}
			return ""
		}
		b, err := io.ReadAll(io.LimitReader(note, 64<<10))
		note.Close()
		if err != nil {
			return ""
		}
		if i := strings.TrimSpace(string(b)); img == "" || img == i {
			img = i
		} else {
			return ""
		}
	}
	return img
}

// rulesOf are the build rules recorded in im, else build's defaults.
func rulesOf(im *image.Image, name string) (*squash.Rules, error) {
	if im == nil {
		return squash.NewRules(nil, nil)
	}
	rules, err := squash.RulesOfBuild(im.BuildInfo())
	if err != nil {
		return nil, fmt.Errorf("image %s records build rules this dlbundle cannot use: %v", name, err)
	}
	return rules, nil
}
