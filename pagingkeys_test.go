package fairrelay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
)

// Every paging key and search text of the Queue's lists is checked before
// the store is read: a key no stored name could hold — invalid UTF-8, or a
// control character, which CheckID refuses in every name — is
// ErrInvalidInput naming the argument, on both backends. PostgreSQL
// answered invalid UTF-8 with an error of its own (ErrDatabase, SQLSTATE
// 22021) and SQLite with an empty page; a breaker's report for Groups and
// GroupSettings, the same kind on every list.
func TestEveryListRefusesAPagingKeyNoNameHolds(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q := referenceQueue(t, b)
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "e1", Flow: "f1", Group: "g1", Body: []byte(`{}`), At: 1}); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Configure(ctx, fairrelay.ConfigureParams{Group: "g1", Weight: ptr(int64(2)), At: 2}); err != nil {
				t.Fatal(err)
			}
			lists := []struct {
				name, field string
				call        func(key string) error
			}{
				{"Heads", "after", func(k string) error { _, err := q.Heads(ctx, k, 10); return err }},
				{"Events", "after_flow", func(k string) error { _, err := q.Events(ctx, k, 0, 10); return err }},
				{"Groups", "after", func(k string) error { _, err := q.Groups(ctx, k, 10); return err }},
				{"GroupSettings", "after", func(k string) error { _, err := q.GroupSettings(ctx, k, 10); return err }},
				{"Flows after", "after", func(k string) error {
					_, err := q.Flows(ctx, fairrelay.FlowsParams{After: k, Limit: 10})
					return err
				}},
				{"Flows paused after", "after", func(k string) error {
					_, err := q.Flows(ctx, fairrelay.FlowsParams{After: k, Paused: true, Limit: 10})
					return err
				}},
				{"Flows prefix", "prefix", func(k string) error {
					_, err := q.Flows(ctx, fairrelay.FlowsParams{Prefix: k, Limit: 10})
					return err
				}},
				{"QuarantinedAfter", "after", func(k string) error { _, err := q.QuarantinedAfter(ctx, k, 10); return err }},
				{"QuarantinedWhere prefix", "prefix", func(k string) error {
					_, err := q.QuarantinedWhere(ctx, fairrelay.QuarantinedParams{Prefix: k, Limit: 10})
					return err
				}},
			}
			for _, l := range lists {
				for _, key := range []string{"\xff", "f\xc3", "f\x00", "g\x7f1"} {
					err := l.call(key)
					var fe *fairrelay.Error
					if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != l.field {
						t.Errorf("%s(%q): %v, want invalid_input naming %s", l.name, key, err, l.field)
					}
				}
				// A key that is a name, stored or not, pages as before.
				for _, key := range []string{"", "f0", "zzz", "é"} {
					if err := l.call(key); err != nil {
						t.Errorf("%s(%q): %v, want a page", l.name, key, err)
					}
				}
			}
		})
	}
}
