// Package pgstress holds the multi-process tests of the PostgreSQL backend:
// real OS processes — the test binary restarted in a child mode — share one
// queue store and one inbox on a real PostgreSQL server.
//
//   - TestInvariantsUnderConcurrentClaims: 8 processes × 4 connections drain
//     1 000 flows and 20 000 events, then the invariants are checked — at
//     most one live lease per flow, no head skipped, no event acked twice,
//     per-flow order at the receiver — and the rotation's drift is reported.
//   - TestEightProcessClaimRace: SPEC §5 item 7 on PostgreSQL.
//   - TestCrashMatrix: SPEC §5 item 8 on PostgreSQL, a child process exiting
//     at each fault point.
//   - TestAStoppedProcessHoldsTheStoreOnlyUntilItsSessionTimesOut: a child
//     SIGSTOPped inside a transaction that holds a writer lane; another
//     process claims again once the server ends its session.
//
// The package has no API: it exists for its tests. Run them with
//
//	go test ./internal/harness/pgstress -v
//
// against the server named by FAIRRELAY_PG_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable).
package pgstress
