package main

import (
	"fmt"
	"github.com/fairrelay/fairrelay"
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay/internal/harness/experiment"
)

func init() { rootCmd.AddCommand(newExperimentCmd()) }

// defaultFrozen is the frozen results file, relative to the repository root.
const defaultFrozen = "experiments/results.json"

func newExperimentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "experiment",
		Short: "Reproduce every result of the article (SPEC §5) and check it against the frozen results",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newExperimentRunCmd(), newExperimentCheckCmd(), newExperimentWorkerCmd())
	return cmd
}

// experimentFlags are the flags run and check share.
type experimentFlags struct {
	only []string
	dir  string
}

func (f *experimentFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.only, "scenario", nil, "run only these scenarios (repeatable; default: all)")
	cmd.Flags().StringVar(&f.dir, "dir", "", "directory for the fresh SQLite files (default: a temporary directory, removed afterwards)")
}

// run runs the scenarios with a progress bar on stderr; the worker processes
// are this executable's hidden `experiment worker` subcommand.
func (f *experimentFlags) run(cmd *cobra.Command) ([]experiment.Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the fairrelay executable for the worker processes: %w", err)
	}
	dir := f.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "fairrelay-experiment-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	scs, err := experiment.Select(f.only)
	if err != nil {
		return nil, err
	}
	// The bar is for people watching a terminal; CI logs get the report only.
	bar := progressbar.NewOptions(len(scs), progressbar.OptionSetWriter(cmd.ErrOrStderr()),
		progressbar.OptionSetVisibility(isTerminal(cmd.ErrOrStderr())),
		progressbar.OptionSetDescription("experiments"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	defer bar.Finish()
	return experiment.Run(cmd.Context(), experiment.Options{
		Dir:    dir,
		Worker: experiment.Worker{Path: exe, Args: []string{"experiment", "worker"}},
		Only:   f.only,
		Progress: func(done, total int, name string) {
			bar.Describe(name)
			bar.Set(done)
		},
	})
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newExperimentRunCmd() *cobra.Command {
	var f experimentFlags
	var output string
	cmd := &cobra.Command{
		Use:   "run [--output FILE]",
		Short: "Run every scenario on fresh SQLite files and write the results as one JSON document",
		Long: `Runs every scenario of SPEC §5 on fresh SQLite files (the crash rows and the
claim race in real child processes) and writes one JSON document of business
facts: the form of experiments/results.json. Exits 1 when a scenario fails or
breaks its SPEC claim (the document is still written).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			results, err := f.run(cmd)
			if err != nil {
				return err
			}
			b, err := experiment.NewDocument(results).Marshal()
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				_, err = cmd.OutOrStdout().Write(b)
			} else {
				err = os.WriteFile(output, b, 0o644)
			}
			if err != nil {
				return err
			}
			rep := experiment.Report{Results: results}
			if !rep.OK() {
				rep.Write(cmd.ErrOrStderr())
				return notApplied("experiment run: some scenarios failed")
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the document to FILE (default: standard output)")
	return cmd
}

func newExperimentCheckCmd() *cobra.Command {
	var f experimentFlags
	var frozenPath string
	cmd := &cobra.Command{
		Use:   "check [--frozen FILE]",
		Short: "Run every scenario and compare with the frozen results; non-zero exit on any difference",
		Long: `Runs the scenarios like 'experiment run' and compares every value with the
frozen document (experiments/results.json, read relative to the current
directory: run it from the repository root). Prints one line per scenario and
the crash matrix; exits 1 on any broken claim or difference.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := os.ReadFile(frozenPath)
			if err != nil {
				// The answers' format: a code and the flag (a fresh user's
				// report: this one line had neither).
				return fairrelay.InvalidInput("frozen", "cannot read the frozen results (run from the repository root, or give --frozen FILE): %v", err)
			}
			frozen, err := experiment.ParseDocument(b)
			if err != nil {
				return err
			}
			results, err := f.run(cmd)
			if err != nil {
				return err
			}
			if len(f.only) > 0 {
				frozen = frozen.Subset(f.only)
			}
			rep := experiment.Check(frozen, results)
			if err := rep.Write(cmd.OutOrStdout()); err != nil {
				return err
			}
			if !rep.OK() {
				return notApplied("experiment check: results differ from %s", frozenPath)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&frozenPath, "frozen", defaultFrozen, "the frozen results to compare with")
	return cmd
}

// newExperimentWorkerCmd is the child process of the process scenarios; the
// runner starts it, nobody else should.
func newExperimentWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "worker MODE --queue Q [--inbox I] --at TICK",
		Short:              "Internal: the child process of the experiments",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return experiment.RunWorker(cmd.Context(), args, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}
