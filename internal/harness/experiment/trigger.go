package experiment

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/sqlfile"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

//go:embed triggers.sql
var triggersSQL string

var triggers = sqlfile.Queries(triggersSQL)

// triggerMessage is the text every experiment trigger raises; the caller's
// error must carry it.
const triggerMessage = "fairrelay experiment: trigger rejects the write"

// installTriggers creates the named triggers in the SQLite file at path, on
// a connection of its own.
func installTriggers(ctx context.Context, path string, names ...string) error {
	db, err := sql.Open("sqlite", sqlitestore.DSN(path, 5*time.Second, false))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, n := range names {
		if _, err := db.ExecContext(ctx, triggers[n]); err != nil {
			return fmt.Errorf("install trigger %s: %w", n, err)
		}
	}
	return nil
}

// errorFacts is how a scenario freezes an error that must reach the caller:
// that there was one, its fairrelay code, and whether the database's own
// message came through.
type errorFacts struct {
	Returned       bool           `json:"returned"`
	Code           fairrelay.Code `json:"code"`
	CarriesMessage bool           `json:"carries_trigger_message"`
}

func errorFactsOf(err error) errorFacts {
	if err == nil {
		return errorFacts{}
	}
	return errorFacts{Returned: true, Code: fairrelay.CodeOf(err), CarriesMessage: strings.Contains(err.Error(), triggerMessage)}
}

// expectError checks that err came through as a database error carrying the
// trigger's message.
func (s *session) expectError(op string, e errorFacts) {
	s.expect(e.Returned, "%s succeeded under a trigger that rejects its write", op)
	s.expect(!e.Returned || (e.Code == fairrelay.CodeDatabase && e.CarriesMessage),
		"%s failed with code %q (carries the trigger's message: %v), want a database error carrying it", op, e.Code, e.CarriesMessage)
}

type eventTriggerFacts struct {
	// Enqueue is enqueue's answer; nil when it failed, as it must.
	Enqueue *fairrelay.EnqueueResult `json:"enqueue"`
	Error   errorFacts               `json:"error"`
	Final   state                    `json:"final"`
}

// triggerRejectsEventInsert is SPEC §5 item 9: the event insert of an
// enqueue fails, so the flow counter that the same transaction raised must
// not move.
func triggerRejectsEventInsert(ctx context.Context, s *session) (any, error) {
	q, in, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := enqueue(ctx, q, 0, ledgerEvent{"A1", "A", 1}); err != nil {
		return nil, err
	}
	if err := installTriggers(ctx, s.queuePath(), "RejectEventInsert"); err != nil {
		return nil, err
	}
	var f eventTriggerFacts
	r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: ledgerBody(1), At: 1})
	if f.Error = errorFactsOf(err); err == nil {
		f.Enqueue = &r
	}
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	s.expectError("enqueue A2", f.Error)
	s.expect(f.Final.flow("A").Seq == 1, "flow A seq %d after the failed enqueue, want 1 (unchanged)", f.Final.flow("A").Seq)
	s.expect(len(f.Final.Events) == 1, "%d events after the failed enqueue, want 1", len(f.Final.Events))
	s.expect(f.Final.Clock.Tick == 0, "tick %d after the failed enqueue, want 0 (a failed transaction changes nothing)", f.Final.Clock.Tick)
	return f, nil
}

type projectionTriggerFacts struct {
	Claimed string `json:"claimed"`
	// Received is the inbox's answer; null when it failed, as it must.
	Received *fairrelay.Outcome `json:"received"`
	Error    errorFacts         `json:"error"`
	Final    state              `json:"final"`
}

// triggerRejectsProjectionWrite is SPEC §5 item 9: the effect of a receive
// fails, so the receipt written before it in the same transaction must not
// stay, and the error reaches the worker (which then does not settle).
func triggerRejectsProjectionWrite(ctx context.Context, s *session) (any, error) {
	q, in, c, err := s.claimA1(ctx, 3)
	if err != nil {
		return nil, err
	}
	if err := installTriggers(ctx, s.inboxPath(), "RejectProjectionInsert", "RejectProjectionUpdate"); err != nil {
		return nil, err
	}
	f := projectionTriggerFacts{Claimed: c.Token.EventID}
	out, err := in.Receive(ctx, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body})
	if f.Error = errorFactsOf(err); err == nil {
		f.Received = &out
	}
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	s.expectError("receive A1", f.Error)
	s.expect(f.Received == nil, "receive answered %v, want no outcome (an error is never an outcome)", f.Received)
	s.expect(len(f.Final.Receipts) == 0 && len(f.Final.Projection) == 0, "%d receipts and %d projections after the failed receive, want none",
		len(f.Final.Receipts), len(f.Final.Projection))
	a1 := f.Final.event("A1")
	s.expect(a1.State == fairrelay.StateInflight && a1.Generation == 1, "A1 is %s at generation %d, want inflight at 1 (not settled)", a1.State, a1.Generation)
	return f, nil
}

type auditTriggerFacts struct {
	Quarantine delivery `json:"quarantine"`
	// Redrive is redrive's answer; nil when it failed, as it must.
	Redrive *fairrelay.RedriveResult `json:"redrive"`
	Error   errorFacts               `json:"error"`
	// ClaimAfter is a claim right after the failed redrive: idle, since A1
	// still blocks its flow.
	ClaimAfter string `json:"claim_after"`
	Final      state  `json:"final"`
}

// triggerRejectsAuditInsert is SPEC §5 item 9: a redrive whose audit row
// cannot be written must not release the event either.
func triggerRejectsAuditInsert(ctx context.Context, s *session) (any, error) {
	q, in, err := s.openWith(ctx, fairrelay.ReferencePolicy(), 5)
	if err != nil {
		return nil, err
	}
	if err := enqueue(ctx, q, 0, ledgerEvent{"A1", "A", 10}); err != nil {
		return nil, err
	}
	var f auditTriggerFacts
	if f.Quarantine, err = deliver(ctx, q, in, 0); err != nil {
		return nil, err
	}
	if err := installTriggers(ctx, s.queuePath(), "RejectAuditInsert"); err != nil {
		return nil, err
	}
	r, err := q.Redrive(ctx, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: f.Quarantine.Generation,
		Reason: "receiver now supports delta up to 1000", Operator: "experiment", At: 1})
	if f.Error = errorFactsOf(err); err == nil {
		f.Redrive = &r
	}
	cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 1})
	if err != nil {
		return nil, err
	}
	c := cr.First()
	f.ClaimAfter = idle
	if c != nil {
		f.ClaimAfter = c.Token.EventID
	}
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	s.expect(f.Quarantine.Settled == fairrelay.SettleQuarantined, "A1 settled %s at tick 0, want quarantined", f.Quarantine.Settled)
	s.expectError("redrive A1", f.Error)
	a1 := f.Final.event("A1")
	s.expect(a1.State == fairrelay.StateQuarantined && a1.Generation == f.Quarantine.Generation,
		"A1 is %s at generation %d, want quarantined at %d", a1.State, a1.Generation, f.Quarantine.Generation)
	s.expect(len(f.Final.Audit) == 0, "%d audit rows, want none", len(f.Final.Audit))
	s.expect(f.ClaimAfter == idle, "claim after the failed redrive took %s, want idle", f.ClaimAfter)
	return f, nil
}
