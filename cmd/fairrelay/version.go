package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(newVersionCmd())
	// fairrelay --version prints the same line as fairrelay version.
	rootCmd.Version = readVersion().String()
	rootCmd.SetVersionTemplate("{{.Version}}\n")
}

// version is the release this binary was built as, set at link time:
//
//	go build -ldflags "-X main.version=v0.3.0" ./cmd/fairrelay
//
// Empty, the version comes from the build information Go records: the
// module version for `go install …@v0.3.0`, else the commit.
var version = ""

// buildVersion describes this binary: its version, the commit and time
// of the source it was built from (and whether that had uncommitted
// changes), and the Go toolchain and platform.
type buildVersion struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func readVersion() buildVersion {
	v := buildVersion{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if v.Version == "" {
			v.Version = "unknown"
		}
		return v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if v.Version == "" {
		v.Version = info.Main.Version // v0.3.0 from go install; (devel) or a pseudo-version from a checkout
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	return v
}

func (v buildVersion) String() string {
	var extra []string
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if v.Modified {
			c += "+modified"
		}
		extra = append(extra, "commit "+c)
	}
	if v.Time != "" {
		extra = append(extra, v.Time)
	}
	extra = append(extra, v.Go, v.Platform)
	return fmt.Sprintf("fairrelay %s (%s)", v.Version, strings.Join(extra, ", "))
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version of this binary, the commit it was built from and its Go version",
		Long: `Prints one line: the version (set at build time with
-ldflags "-X main.version=vX.Y.Z", else the module version go install
recorded, else "(devel)"), the commit and its time, the Go version and the
platform. --json prints them as one JSON object.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := readVersion()
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), v)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
