package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// version names the binary: its version, the Go toolchain, the platform.
func TestVersion(t *testing.T) {
	t.Parallel()
	out, errOut, code := cli(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "fairrelay ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
		t.Fatalf("version: exit %d %q %q", code, out, errOut)
	}
	// --version, the flag most tools take, prints the same line.
	if flag, errOut, code := cli(t, "", "--version"); code != 0 || flag != out {
		t.Errorf("--version: exit %d %q %q; want %q", code, flag, errOut, out)
	}
	out, _, _ = cli(t, "", "version", "--json")
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version == "" || v.Go != runtime.Version() {
		t.Fatalf("version --json: %q %v", out, err)
	}
}

// A release sets its version at link time, and version prints it.
func TestVersionFromLdflags(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "fairrelay")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "fairrelay v9.8.7-test (") {
		t.Fatalf("version of a build with -X main.version: %q %v", out, err)
	}
}
