package consume

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay/inbox"
)

// Metrics are the consumer's Prometheus metrics (Options.Metrics). A nil
// *Metrics records nothing.
type Metrics struct {
	messages *prometheus.CounterVec
	errs     *prometheus.CounterVec
}

// heldReadTimeout bounds the inbox read behind fairrelay_inbox_held at a
// scrape.
const heldReadTimeout = 5 * time.Second

// NewMetrics creates the consumer's metrics and registers them on reg:
//   - fairrelay_consume_messages_total{action, outcome}: messages settled
//     with the broker, by what was done (Action: ack, redeliver, reject,
//     hold, applied) and the inbox's answer (a fairrelay.Outcome; "none"
//     when there was none: a message not decoded, an inbox error). A rising
//     hold with outcome gap is out-of-order redelivery or a stuck flow; a
//     hold with a permanent outcome is a poison event;
//   - fairrelay_consume_errors_total{action}: messages whose decoding, inbox
//     transaction or broker call (ack, redelivery, rejection) failed, by
//     action (Applied.Err), and with action applied the inbox transactions
//     that failed to apply a flow's held messages (retried later);
//   - fairrelay_inbox_held{state}, when in is not nil: the deliveries held
//     in the inbox now, read at each scrape within 5 s (as
//     inbox.Inbox.HeldCounts reads them): state "waiting", past their
//     flow's last applied seq, and "superseded", copies of seqs applied
//     already under another id or body (a faulty publisher's), which never
//     apply and stay listed. Waiting above zero for long, some flow is
//     stuck: `fairrelay inspect --inbox I held` lists them. A failed read
//     gives the registry's Gather an error for this metric rather than a
//     number (a handler with promhttp.ContinueOnError serves the rest).
//
// The errors' series start at zero for every action. Errors: reg's (a
// metric registered twice).
func NewMetrics(reg prometheus.Registerer, in *inbox.Inbox) (*Metrics, error) {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fairrelay_consume_messages_total",
			Help: "Messages settled with the broker, by action (ack, redeliver, reject, hold, applied) and the inbox's outcome (none when there was none)."},
			[]string{"action", "outcome"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fairrelay_consume_errors_total",
			Help: "Messages whose decoding, inbox transaction or broker call failed, by action."}, []string{"action"}),
	}
	for _, a := range []Action{ActionAck, ActionRedeliver, ActionReject, ActionHold, ActionApplied} {
		m.errs.WithLabelValues(string(a))
	}
	cs := []prometheus.Collector{m.messages, m.errs}
	if in != nil {
		cs = append(cs, heldCollector{in: in, desc: prometheus.NewDesc("fairrelay_inbox_held",
			"Deliveries held in the inbox now: waiting (for their predecessor, or refused until the cause is fixed) and superseded (copies of applied seqs under another id or body, which never apply).",
			[]string{"state"}, nil)})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe counts one settled message.
func (m *Metrics) observe(a Applied) {
	if m == nil {
		return
	}
	outcome := string(a.Outcome)
	if outcome == "" {
		outcome = "none"
	}
	m.messages.WithLabelValues(string(a.Action), outcome).Inc()
	if a.Err != nil {
		m.errs.WithLabelValues(string(a.Action)).Inc()
	}
}

// drainFailed counts an inbox transaction that failed to apply held
// messages.
func (m *Metrics) drainFailed() {
	if m == nil {
		return
	}
	m.errs.WithLabelValues(string(ActionApplied)).Inc()
}

// heldCollector reads fairrelay_inbox_held from the inbox at each scrape.
type heldCollector struct {
	in   *inbox.Inbox
	desc *prometheus.Desc
}

func (c heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c heldCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), heldReadTimeout)
	defer cancel()
	waiting, superseded, err := c.in.HeldCounts(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(waiting), "waiting")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(superseded), "superseded")
}
