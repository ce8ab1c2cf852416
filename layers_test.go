package fairrelay_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The layering of ARCHITECTURE.md, checked on the real import graph (go
// list): the machinery under internal/ — the store seam and its backends,
// sqlfile, faultpoint, ident, jsontext, pgtest — never imports the root
// package, not even through another package; the harnesses that drive the
// API live under internal/harness; and the root package imports none of
// them.
func TestLayers(t *testing.T) {
	t.Parallel()
	const mod = "github.com/fairrelay/fairrelay"
	out, err := exec.Command("go", "list", "-deps=false", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		harness := strings.HasPrefix(pkg, mod+"/internal/harness/")
		machinery := strings.HasPrefix(pkg, mod+"/internal/") && !harness
		for _, d := range deps {
			switch {
			case machinery && d == mod:
				t.Errorf("%s (machinery) imports the root package: move it under internal/harness, or cut the import", pkg)
			case pkg == mod && strings.HasPrefix(d, mod+"/internal/harness/"):
				t.Errorf("the root package imports the harness %s", d)
			}
		}
		if machinery {
			checked++
		}
	}
	if checked < 6 {
		t.Fatalf("checked %d machinery packages, want at least 6: is go list answering for this module?", checked)
	}
}
