package bench_test

import (
	"testing"

	"github.com/fairrelay/fairrelay/internal/harness/bench"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
)

// A small run on each shared broker: every rate measured, the ratios are
// the relay's rate over the plain ones, and the stream or queue is gone.
func TestRunBrokerReportShape(t *testing.T) {
	t.Parallel()
	for _, url := range []func(testing.TB) string{brokertest.NATS, brokertest.AMQP} {
		rep, err := bench.RunBroker(t.Context(), bench.BrokerOptions{URL: url(t), User: brokertest.AMQPUser, Password: brokertest.AMQPPassword,
			Dir: t.TempDir(), Events: 200, Workers: 8, Rounds: 2})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Events != 200 || rep.Workers != 8 || rep.PlainLoop <= 0 || rep.PlainConcurrent <= 0 || rep.Relay <= 0 {
			t.Fatalf("%s: report %+v", rep.Broker, rep)
		}
		if d := rep.RatioToLoop - rep.Relay/rep.PlainLoop; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: ratio to the loop %v, want %v", rep.Broker, rep.RatioToLoop, rep.Relay/rep.PlainLoop)
		}
	}
}

func TestRunBrokerRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []bench.BrokerOptions{
		{URL: "http://127.0.0.1:1", Events: 10},
		{URL: "nats://127.0.0.1:1", Events: 3, Rounds: 5},
		{URL: "nats://127.0.0.1:1", Workers: 5000},
	} {
		if _, err := bench.RunBroker(t.Context(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
