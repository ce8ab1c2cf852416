package inbox_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// BenchmarkReceive applies b.N deliveries over 100 flows, one transaction
// each, on a real SQLite file and on PostgreSQL; ns/op is the cost of one
// accepted delivery. index=received_ms is the inbox as migrated;
// index=none drops the receipts' received_ms index (inbox migration 007,
// for retention) first, to show what keeping it costs a receive.
func BenchmarkReceive(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, index := range []string{"received_ms", "none"} {
			b.Run(fmt.Sprintf("backend=%s/index=%s", backend, index), func(b *testing.B) {
				dsn := filepath.Join(b.TempDir(), "inbox.db")
				if backend == "postgres" {
					dsn = pgtest.Schema(b, "frinbench")
				}
				in, err := inbox.Open(b.Context(), dsn, inbox.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer in.Close()
				if index == "none" {
					if _, err := in.DB().ExecContext(b.Context(), `DROP INDEX receipt_received`); err != nil {
						b.Fatal(err)
					}
				}
				body := []byte(`{"delta":1}`)
				b.ResetTimer()
				for i := range b.N {
					d := inbox.Delivery{EventID: fmt.Sprintf("e-%d", i), Flow: fmt.Sprintf("f-%d", i%100), Seq: int64(i/100 + 1), Body: body}
					if out, err := in.Receive(b.Context(), d); err != nil || out != fairrelay.OutcomeAccepted {
						b.Fatalf("receive %d: %q %v", i, out, err)
					}
				}
			})
		}
	}
}
