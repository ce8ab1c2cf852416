package inbox_test

import (
	"errors"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// Every list of the inbox checks its paging key as the Queue's lists do
// (fairrelay.CheckSearch): a key no flow id could hold — invalid UTF-8 or a
// control character — is invalid_input naming the argument, on both
// backends, not a database error (PostgreSQL) or an empty page (SQLite).
func TestEveryInboxListRefusesAPagingKeyNoFlowHolds(t *testing.T) {
	eachBackend(t, "frinkeys", inbox.Options{}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		if _, err := in.Receive(ctx, inbox.Delivery{EventID: "e1", Flow: "f1", Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil {
			t.Fatal(err)
		}
		lists := []struct {
			name, field string
			call        func(key string) error
		}{
			{"Receipts", "after_flow", func(k string) error { _, err := in.Receipts(ctx, k, 0, 10); return err }},
			{"Projections", "after_flow", func(k string) error { _, err := in.Projections(ctx, k, 10); return err }},
			{"HeldFlows", "after", func(k string) error { _, err := in.HeldFlows(ctx, k, 10); return err }},
			{"Held", "after_flow", func(k string) error { _, err := in.Held(ctx, k, 0, 10); return err }},
			{"Waivers", "after_flow", func(k string) error { _, err := in.Waivers(ctx, k, 0, 10); return err }},
		}
		for _, l := range lists {
			for _, key := range []string{"\xff", "f\xc3", "f\x00", "f\x7f1"} {
				err := l.call(key)
				var fe *fairrelay.Error
				if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != l.field {
					t.Errorf("%s(%q): %v, want invalid_input naming %s", l.name, key, err, l.field)
				}
			}
			for _, key := range []string{"", "f0", "zzz", "é"} {
				if err := l.call(key); err != nil {
					t.Errorf("%s(%q): %v, want a page", l.name, key, err)
				}
			}
		}
	})
}
