package main

import (
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay/internal/sqlitetest"
)

// waive reads its waiver back after it committed, to say when an earlier
// waiver of the seq kept another operator and reason. When that read
// failed, waive printed only the read's error and exited 2: the waiver
// was recorded, and nothing said so (an audit of the writes reported as
// failed by a read that follows them; an operator reading "database" would
// take the waiver for not made). Now it prints {"status":"waived"} and the
// error says the waiver is recorded and what failed after, still exit 2.
// The read fails for real: a trigger of the test writes the new waiver's
// time in a form the read refuses.
func TestWaiveSaysItWaivedWhenItsReadBackFails(t *testing.T) {
	t.Parallel()
	in, dsn := refusedA1(t)
	sqlitetest.Exec(t, dsn, `CREATE TRIGGER garble AFTER INSERT ON waiver BEGIN
UPDATE waiver SET waived_at = 'not a time' WHERE flow_id = NEW.flow_id AND seq = NEW.seq; END`)
	out, errOut, code := cli(t, "", "waive", "--inbox", dsn, "--flow", "A", "--seq", "1", "--id", "A1", "--reason", "credited by hand", "--unchecked")
	if code != exitFailed || strings.TrimSpace(out) != `{"status":"waived"}` || !strings.Contains(errOut, "the waiver is recorded") || !strings.Contains(errOut, "not a time") {
		t.Errorf("waive whose read back failed: exit %d, stdout %q, stderr %q; want exit %d, waived, and an error saying the waiver is recorded and why the read failed", code, out, errOut, exitFailed)
	}
	sqlitetest.Exec(t, dsn, `DROP TRIGGER garble; UPDATE waiver SET waived_at = '2026-01-01T00:00:00Z'`)
	if ws, err := in.Waivers(t.Context(), "", 0, 10); err != nil || len(ws) != 1 || ws[0].EventID != "A1" {
		t.Errorf("waivers after it: %+v %v, want A1's", ws, err)
	}
}
