package sink_test

import (
	"context"
	"testing"

	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/sinktest"
)

// inProcess is the smallest real sink: the receiver's inbox in the same
// process, reached through sink.Func.
func inProcess(t *testing.T, in *inbox.Inbox) sink.Sink {
	return sink.Func(func(ctx context.Context, d sink.Delivery) (sink.Result, error) {
		o, err := in.Receive(ctx, inbox.Delivery{EventID: d.EventID, Flow: d.Flow, Seq: d.Seq, Body: d.Body})
		return sink.Result{Outcome: o}, err
	})
}

func TestFuncConformance(t *testing.T) { sinktest.Run(t, inProcess) }
