// Package outboxstress tests the outbox on a real PostgreSQL the way
// applications use it (issue 14, SPEC §10): business transactions in
// several OS processes and many goroutines enqueue inside their own
// transactions — some commit, some roll back, some stay open for seconds,
// several on the same flows — while two relays dispatch, woken by the
// store's notifications. It has no code of its own: its tests re-execute
// the test binary as producer processes (TestMain), as
// internal/harness/pgstress does for claims.
package outboxstress
