package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// waive records a waiver of the flow's next seq (exit 0,
// {"status":"waived"}), refuses another seq or a missing reason (exit 2,
// nothing written) and an inbox that does not exist (creating nothing);
// inspect --inbox I waivers lists it with who and why; the waived event
// then answers duplicate.
func TestWaiveCommand(t *testing.T) {
	t.Parallel()
	dsn := filepath.Join(t.TempDir(), "inbox.db")
	in, err := inbox.Open(t.Context(), dsn, inbox.Options{MaxDelta: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	poison := inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":100}`)}
	if out, err := in.Receive(t.Context(), poison); err != nil || out != fairrelay.OutcomeUnsupportedDelta {
		t.Fatalf("A1: %q %v", out, err)
	}
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := cli(t, "", args...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d: %s%s", args, code, want, out, errOut)
		}
		return strings.TrimSpace(out), errOut
	}
	_, errOut := run(2, "waive", "--inbox", dsn, "--flow", "A", "--seq", "2", "--id", "A1", "--reason", "x")
	if !strings.Contains(errOut, "only seq 1") {
		t.Errorf("waive of seq 2: stderr %q, want it to name seq 1", errOut)
	}
	run(2, "waive", "--inbox", dsn, "--flow", "A", "--seq", "1", "--id", "A1")
	missing := filepath.Join(t.TempDir(), "nope.db")
	run(2, "waive", "--inbox", missing, "--flow", "A", "--seq", "1", "--id", "A1", "--reason", "x")
	if m, _ := filepath.Glob(missing + "*"); len(m) != 0 {
		t.Errorf("waive on a missing inbox created %v", m)
	}
	if got, _ := run(0, "inspect", "--inbox", dsn, "waivers", "--json"); got != "" {
		t.Fatalf("waivers after refused waives: %s", got)
	}
	if got, _ := run(0, "waive", "--inbox", dsn, "--flow", "A", "--seq", "1", "--id", "A1", "--reason", "credited by hand", "--operator", "ana"); got != `{"status":"waived"}` {
		t.Fatalf("waive: %s", got)
	}
	got, _ := run(0, "inspect", "--inbox", dsn, "waivers", "--json")
	if !strings.Contains(got, `"flow":"A","seq":1,"id":"A1","reason":"credited by hand","operator":"ana"`) {
		t.Fatalf("inspect waivers: %s", got)
	}
	if table, _ := run(0, "inspect", "--inbox", dsn, "waivers"); !strings.Contains(table, "credited by hand") || !strings.Contains(table, "ana") {
		t.Fatalf("inspect waivers table:\n%s", table)
	}
	if out, err := in.Receive(t.Context(), poison); err != nil || out != fairrelay.OutcomeDuplicate {
		t.Fatalf("A1 after the waiver: %q %v, want duplicate", out, err)
	}
}
