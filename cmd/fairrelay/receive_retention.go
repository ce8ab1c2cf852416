package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay/inbox"
)

// retainReceipts starts the inbox's receipt retention (inbox.Inbox.Retain)
// when keep is positive — every minute, the receipts written longer than
// keep ago, in batches of 500 — counting what it deletes and its failed
// passes on reg when set; it returns a func that stops it and waits for it
// to end (before the inbox closes).
func retainReceipts(ctx context.Context, in *inbox.Inbox, keep time.Duration, reg *prometheus.Registry, log *slog.Logger) (func(), error) {
	if keep <= 0 {
		return func() {}, nil
	}
	p := inbox.RetainParams{Keep: keep, Logger: log}
	if reg != nil {
		pruned := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_inbox_pruned_receipts_total", Help: "Receipts the receiver's retention deleted (--retain-receipts)."})
		failed := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_inbox_prune_errors_total", Help: "Passes of the receiver's retention that failed (tried again a minute later)."})
		for _, c := range []prometheus.Collector{pruned, failed} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
		p.Pruned = func(n int64) { pruned.Add(float64(n)) }
		p.Failed = func(error) { failed.Inc() }
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.Retain(ctx, p) // keep > 0 and the defaults: no params error
	}()
	return func() {
		cancel()
		<-done
	}, nil
}
