package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// A receiver's own effect: each event records a shipment, in the
// transaction of its receipt. The second copy of e1 answers duplicate and
// writes nothing; a body without an order is refused for good.
func ExampleOptions_apply() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "inbox")
	defer os.RemoveAll(dir)
	in, err := inbox.Open(ctx, filepath.Join(dir, "inbox.db"), inbox.Options{
		Apply: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error) {
			var o struct {
				Order string `json:"order_id"`
			}
			if json.Unmarshal(d.Body, &o) != nil || o.Order == "" {
				return fairrelay.OutcomeInvalidBody, nil // permanent: the relay quarantines the event
			}
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS shipments (order_id TEXT, event_id TEXT PRIMARY KEY)`); err != nil {
				return "", err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id, event_id) VALUES ($1, $2)`, o.Order, d.EventID); err != nil {
				return "", err // rolled back; the handler answers 500 and the relay retries
			}
			return fairrelay.OutcomeAccepted, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer in.Close()
	for _, d := range []inbox.Delivery{
		{EventID: "e1", Flow: "order-7", Seq: 1, Body: []byte(`{"order_id":"7"}`)},
		{EventID: "e1", Flow: "order-7", Seq: 1, Body: []byte(`{"order_id":"7"}`)},
		{EventID: "e2", Flow: "order-7", Seq: 2, Body: []byte(`{"note":"no order"}`)},
	} {
		out, err := in.Receive(ctx, d)
		fmt.Println(d.EventID, out, err)
	}
	// Output:
	// e1 accepted <nil>
	// e1 duplicate <nil>
	// e2 invalid_body <nil>
}
