// Package chaos holds the chaos test of issue 15: the real fairrelay binary,
// run as two relays, a receiver and a producer on one queue, while a seeded
// schedule SIGKILLs the relays and the receiver (and now and then the
// producer) and restarts them, and SIGSTOPs relays and the receiver for
// longer than the lease before it SIGCONTs them — on SQLite and on
// PostgreSQL.
//
// What it proves, once the chaos stops and the relays have drained the
// queue, from the stores themselves (the queue's Snapshot, the inbox's
// receipts and ledger):
//
//   - nothing lost: every event the producer enqueued is acked;
//   - nothing applied twice: one receipt per event, and each flow's ledger
//     total is the sum of its events' deltas;
//   - per-flow order: each flow's receipts hold seqs 1..n, seq k being the
//     flow's k-th event as the producer wrote it (the inbox answers gap to
//     an event whose predecessor it has not applied, so a receipt exists
//     only where every earlier one does);
//   - no accidental quarantine: no event quarantined, no audit row (the
//     budget is sized far beyond the longest outage the schedule makes, so
//     a quarantine means an outcome the faults should never produce);
//   - clean processes: no relay or receiver exits unless killed, and each
//     stops with exit code 0 on SIGTERM at the end.
//
// The producer is `fairrelay enqueue` reading JSON lines from a pipe; when
// it dies (killed, or a write lock held past the busy timeout by a stopped
// relay) it is started again and given the lines it had not answered, which
// answer existing if they were stored: an outbox producer's retry.
//
// The schedule — when each kill, restart, stop and continue happens, and
// the events the producer writes — is drawn from one seed, logged at the
// start of each run. Replay a run with the same schedule:
//
//	FAIRRELAY_CHAOS_SEED=<seed> go test ./internal/harness/chaos -run 'TestChaos/sqlite' -v
//
// FAIRRELAY_CHAOS_DURATION (a Go duration, default 75s) sets how long the
// chaos runs per backend; the schedule always holds at least 50 kills of
// relays and the receiver, so a shorter one still runs about 50 s.
// FAIRRELAY_CHAOS_LOGS=DIR keeps every process's log in DIR/sqlite and
// DIR/postgres (a failure prints their last lines anyway). The two backends
// run side by side, about a minute and a half each. The test skips under
// -short. The PostgreSQL run takes the server's "pgstress" lock
// (internal/pgtest.Exclusive), so it never overlaps the stress suite, and
// works in fresh schemas that are dropped at the end.
//
// The package has no API: it exists for its test.
package chaos
