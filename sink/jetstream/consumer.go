package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/fairrelay/fairrelay/consume"
)

// ConsumerOptions configure Consume.
type ConsumerOptions struct {
	// Conn is an open connection (see Connect). Required; not closed.
	Conn *nats.Conn
	// Stream is the stream to read. Required.
	Stream string
	// Subjects, when set, create the stream with these subjects (file
	// storage, limits retention) if it does not exist; when empty, a
	// missing stream is an error.
	Subjects []string
	// Durable is the durable consumer's name: created, or updated to these
	// options, and kept on the server when Consume returns, so a restarted
	// consumer goes on where this one stopped. Required.
	Durable string
	// FilterSubject, when set, reads only these subjects of the stream.
	FilterSubject string
	// AckWait is how long the server waits for an ack before it delivers
	// a message again. Defaults to 30s.
	AckWait time.Duration
	// MaxAckPending bounds the messages delivered and not acked yet.
	// Defaults to 1024.
	MaxAckPending int
	// Ready, when set, is called once the stream and the durable consumer
	// exist, before the first message is read.
	Ready func()
}

// Consume reads the durable consumer opts.Durable of opts.Stream and applies
// every message through apply.Inbox with consume.Run (ack after the inbox
// committed; gap, retry and errors redelivered later with NakWithDelay),
// until ctx is done; then it returns nil, and the consumer stays on the
// server. The connection's reconnects are handled inside. Errors: a missing
// stream (without Subjects), a consumer the server refuses, the consumer
// deleted while reading (seen within consumerCheck, 5 s, also when it was
// deleted while the connection was down), or consume.Run's errors.
func Consume(ctx context.Context, opts ConsumerOptions, apply consume.Options) error {
	err := consumeStream(ctx, opts, apply)
	if ctx.Err() != nil {
		return nil // stopped, maybe while still setting up
	}
	return err
}

func consumeStream(ctx context.Context, opts ConsumerOptions, apply consume.Options) error {
	if opts.Conn == nil {
		return invalid("conn", "required: an open *nats.Conn")
	}
	if !validStreamName(opts.Stream) {
		return invalid("stream", "%q is not a stream name", opts.Stream)
	}
	if !validStreamName(opts.Durable) {
		return invalid("durable", "%q is not a consumer name", opts.Durable)
	}
	switch {
	case opts.AckWait < 0:
		return invalid("ack_wait", "must not be negative (0 takes the default, 30s), got %s", opts.AckWait)
	case opts.MaxAckPending < 0:
		return invalid("max_ack_pending", "must not be negative (0 takes the default, 1024), got %d", opts.MaxAckPending)
	}
	if opts.AckWait == 0 {
		opts.AckWait = 30 * time.Second
	}
	if opts.MaxAckPending == 0 {
		opts.MaxAckPending = 1024
	}
	j, err := js.New(opts.Conn)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	stream, err := j.Stream(ctx, opts.Stream)
	if errors.Is(err, js.ErrStreamNotFound) && len(opts.Subjects) > 0 {
		stream, err = j.CreateStream(ctx, js.StreamConfig{Name: opts.Stream, Subjects: opts.Subjects, Storage: js.FileStorage})
	}
	if err != nil {
		return fmt.Errorf("jetstream: stream %s: %w", opts.Stream, err)
	}
	if lossy := DropsUnread(stream.CachedInfo().Config); lossy != "" {
		log := apply.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("jetstream: the stream can drop a message before this consumer acks it, and an event the relay settled is then lost: remove those limits (work-queue retention deletes a message once acked)",
			"stream", opts.Stream, "limits", lossy)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, js.ConsumerConfig{
		Durable:       opts.Durable,
		AckPolicy:     js.AckExplicitPolicy,
		DeliverPolicy: js.DeliverAllPolicy,
		AckWait:       opts.AckWait,
		MaxAckPending: opts.MaxAckPending,
		MaxDeliver:    -1, // a message is never dropped for its delivery count
		FilterSubject: opts.FilterSubject,
	})
	if err != nil {
		return fmt.Errorf("jetstream: consumer %s on %s: %w", opts.Durable, opts.Stream, err)
	}
	// A missed heartbeat (the server restarted, the connection dropped) is
	// the library's to recover from: it pulls again once reconnected. By
	// default Next would also return ErrNoHeartbeat, and consume.Run would
	// stop the consumer on it (CI saw 'nats: no heartbeat received' end
	// TestServerRestartedMidRun's consumer with 13 of 600 events left).
	it, err := cons.Messages(js.PullMaxMessages(min(opts.MaxAckPending, 500)), js.PullExpiry(pullExpiry), js.PullHeartbeat(pullExpiry/3),
		js.WithMessagesErrOnMissingHeartbeat(false))
	if err != nil {
		return fmt.Errorf("jetstream: consume %s: %w", opts.Durable, err)
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	// The consumer deleted while the connection was down (or a server
	// that came back without it) sends no notice: the pulls went
	// unanswered and the consumer waited for ever while its stream
	// filled (a breaker's report). Checked every consumerCheck; gone, it
	// ends Run with an error, as a deletion seen while connected does.
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		t := time.NewTicker(consumerCheck)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			if _, err := cons.Info(runCtx); errors.Is(err, js.ErrConsumerNotFound) || errors.Is(err, js.ErrStreamNotFound) {
				stop(fmt.Errorf("jetstream: consumer %s on %s is gone (deleted, or the server came back without it): %w", opts.Durable, opts.Stream, err))
				return
			}
		}
	}()
	err = consume.Run(runCtx, source{it}, apply)
	if cause := context.Cause(runCtx); err == nil && ctx.Err() == nil && cause != nil {
		err = cause
	}
	// The messages pulled into the client's buffer and not handed out are
	// pending on the server: nak them, or they would wait for AckWait
	// before another consumer gets them (and their flows behind them).
	it.Drain()
	for {
		m, nerr := it.Next(js.NextMaxWait(time.Second))
		if nerr != nil {
			break
		}
		envelope{m}.Redeliver(0)
	}
	// Naks are published without waiting: send them before the caller
	// closes the connection.
	opts.Conn.FlushTimeout(2 * time.Second)
	return err
}

// source adapts a pull iterator to consume.Source.
type source struct{ it js.MessagesContext }

func (s source) Next(ctx context.Context) (consume.Envelope, error) {
	m, err := s.it.Next(js.NextContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("jetstream: next message: %w", err)
	}
	return envelope{m}, nil
}

// envelope is one JetStream message.
type envelope struct{ m js.Msg }

func (e envelope) Message() (consume.Message, error) {
	h := e.m.Headers()
	delivered := 0
	if md, err := e.m.Metadata(); err == nil {
		delivered = int(md.NumDelivered)
	}
	return consume.Decode(h.Get(nats.MsgIdHdr), h.Get, e.m.Data(), delivered)
}

func (e envelope) Ack() error { return e.m.Ack() }

// Redeliver naks the message with delay. Delay 0 — a message handed back
// by a consumer that stops — waits pullExpiry: the stopped consumer's last
// pull request stays open on the server until it expires, and a message
// redelivered before would go to that dead request and wait for AckWait.
func (e envelope) Redeliver(delay time.Duration) error {
	if delay <= 0 {
		delay = pullExpiry
	}
	return e.m.NakWithDelay(delay)
}

// consumerCheck is how often Consume asks the server whether its consumer
// still exists.
const consumerCheck = 5 * time.Second

// pullExpiry is how long a pull request stays open on the server: the most
// a stopped consumer's requests outlive it.
const pullExpiry = 3 * time.Second

func (e envelope) Reject() error { return e.m.Term() }

// DropsUnread names the limits of a stream's configuration under which
// JetStream deletes a message whether or not a consumer acked it — max_age
// (always), max_msgs, max_bytes or max_msgs_per_subject with discard old,
// max_msgs_per_subject with discard new but not discard_new_per_subject —
// or "" when it has none. The relay settles an event once the stream has
// it, so a message dropped unread is an event lost (a breaker's run: a
// work-queue stream with max_age 2s, the consumer started 3 s later, 0 of
// 3 acked events applied). Limits with discard new only refuse new
// messages, which the relay retries — a per-subject limit only with
// discard_new_per_subject as well.
func DropsUnread(c js.StreamConfig) string {
	var l []string
	if c.MaxAge > 0 {
		l = append(l, "max_age "+c.MaxAge.String())
	}
	if c.Discard == js.DiscardOld {
		var old []string
		if c.MaxMsgs > 0 {
			old = append(old, fmt.Sprintf("max_msgs %d", c.MaxMsgs))
		}
		if c.MaxBytes > 0 {
			old = append(old, fmt.Sprintf("max_bytes %d", c.MaxBytes))
		}
		if c.MaxMsgsPerSubject > 0 {
			old = append(old, fmt.Sprintf("max_msgs_per_subject %d", c.MaxMsgsPerSubject))
		}
		if len(old) > 0 {
			l = append(l, strings.Join(old, ", ")+" with discard old")
		}
	} else if c.MaxMsgsPerSubject > 0 && !c.DiscardNewPerSubject {
		// Discard new alone still drops a subject's oldest message at its
		// limit: a per-subject refusal needs discard_new_per_subject too
		// (a breaker's run: 4 publishes to one subject of a discard-new
		// stream with max_msgs_per_subject 2 kept the last 2).
		l = append(l, fmt.Sprintf("max_msgs_per_subject %d without discard_new_per_subject", c.MaxMsgsPerSubject))
	}
	return strings.Join(l, ", ")
}
