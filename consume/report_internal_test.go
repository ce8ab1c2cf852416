package consume

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// A message whose receive failed is redelivered, and the log said "not
// applied" whatever the error. An inbox commit that failed and could not
// be read back (fairrelay.ErrCommitUnknown: inbox.Receive's error then)
// may have applied it: the line says so instead, and not that it was not
// applied (an audit of the claims made on a database error); any other
// error still reads "not applied".
func TestReportDoesNotSayNotAppliedForAnUnknownCommit(t *testing.T) {
	var logs bytes.Buffer
	r := &runner{opts: Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
	m := Message{Delivery: inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1}, Delivered: 1}
	unknown := &fairrelay.Error{Code: fairrelay.CodeDatabase, Message: "receive: commit",
		Err: fmt.Errorf("read tcp: connection reset by peer; whether it committed is unknown: %w", fairrelay.ErrCommitUnknown)}
	r.report(Applied{Message: m, Action: ActionRedeliver, Err: unknown})
	if line := logs.String(); strings.Contains(line, "not applied") || !strings.Contains(line, "may have been applied") {
		t.Errorf("a redelivery after a commit of unknown outcome logged %q; want it to say the message may have been applied", line)
	}
	logs.Reset()
	r.report(Applied{Message: m, Action: ActionRedeliver, Err: errors.New("database is locked")})
	if line := logs.String(); !strings.Contains(line, "consume: not applied, redelivered later") {
		t.Errorf("a redelivery after another error logged %q; want \"not applied\"", line)
	}
}
