package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// TestSmoke runs both workloads once on 200 events: a proof that the
// comparison works, not a measurement (CI runs it; the real run is the
// command in BENCHMARKS.md).
func TestSmoke(t *testing.T) {
	o := options{url: pgtest.URL(t), n: 200, publishers: 8, flows: 100, rounds: 1, relayWorkers: 100,
		poll: 10 * time.Millisecond, timeout: 2 * time.Minute}
	var out bytes.Buffer
	sums, err := run(context.Background(), o, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 2 || sums[0].key != "watermill" || sums[1].key != "fairrelay" {
		t.Fatalf("summaries %+v", sums)
	}
	for _, s := range sums {
		if s.perS <= 0 || s.dups != 0 {
			t.Errorf("%s: %.0f events/s, %d duplicates", s.key, s.perS, s.dups)
		}
	}
	if f := sums[1]; f.violations != 0 {
		t.Errorf("fairrelay: %d order violations, want 0", f.violations)
	}
	if !strings.Contains(out.String(), "| fairrelay (EnqueueTx + the relay) | 200 |") {
		t.Errorf("no table row for fairrelay")
	}
	if _, err := run(context.Background(), options{url: o.url, n: 1, publishers: 1, flows: 1, rounds: 1, relayWorkers: 1, only: "kafka"}, &out); err == nil {
		t.Error("-only kafka: no error")
	}
}

// TestCeilingsSmoke runs the five workloads with no consumer once on 200
// transactions: each commits them all (the bare statement fails loudly if
// it wrote no row) and gets its table row.
func TestCeilingsSmoke(t *testing.T) {
	o := options{url: pgtest.URL(t), n: 200, publishers: 8, flows: 100, rounds: 1, relayWorkers: 1,
		poll: 10 * time.Millisecond, timeout: 2 * time.Minute,
		only: "watermill-publish,fairrelay-publish,bare-publish,lock-insert-publish,plain-publish"}
	var out bytes.Buffer
	sums, err := run(context.Background(), o, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 5 {
		t.Fatalf("summaries %+v", sums)
	}
	for _, s := range sums {
		if s.perS <= 0 || s.publish <= 0 {
			t.Errorf("%s: %.0f events/s, publish %v", s.key, s.perS, s.publish)
		}
		if !strings.Contains(out.String(), "| "+s.name+" | 200 |") {
			t.Errorf("no table row for %s", s.key)
		}
	}
}

// TestLeaseFloorSmoke runs the lease-floor probe once on 200 transactions:
// every event is received once, in order per flow (its consumer settles
// each flow's head before it claims the next).
func TestLeaseFloorSmoke(t *testing.T) {
	o := options{url: pgtest.URL(t), n: 200, publishers: 8, flows: 100, rounds: 1, relayWorkers: 1,
		poll: 10 * time.Millisecond, timeout: 2 * time.Minute, only: "lease-floor"}
	var out bytes.Buffer
	sums, err := run(context.Background(), o, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 1 || sums[0].perS <= 0 || sums[0].dups != 0 || sums[0].violations != 0 {
		t.Fatalf("summaries %+v: want one, with events received, no duplicate and no order violation", sums)
	}
}
