package pgstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Channel is the LISTEN/NOTIFY channel of the store in schema:
// enqueue_many (migration 005) notifies it, with an empty payload, when an
// enqueue made a flow's head claimable (a new flow, or a flow that had no
// head), and PostgreSQL delivers the notification at commit, never for a
// rollback. It is "fairrelay_" followed by the schema name, or by the md5
// of the name (32 hex digits) when the name is longer than 53 bytes: a
// channel name holds at most 63. The SQL side computes the same name from
// current_schema(); any listener, in any language, may LISTEN to it.
func Channel(schema string) string {
	if len(schema) <= 63-len(channelPrefix) {
		return channelPrefix + schema
	}
	sum := md5.Sum([]byte(schema))
	return channelPrefix + hex.EncodeToString(sum[:])
}

const channelPrefix = "fairrelay_"

// listenPing is how long the listening connection may stay quiet before
// it is pinged, and how long the ping may take: a server that vanished
// without closing the connection (a network partition) is noticed within
// twice this time, and the watch is re-established.
const listenPing = 30 * time.Second

// Changes signals every notification of the store's Channel (see
// store.Store.Changes). It listens on a connection of its own, opened with
// the pool's settings but outside the pool, so that a listener never holds
// one of the pool's connections; a connection that fails (a restart, a
// terminated backend, a failed ping) is replaced with backoff, and a
// change is signalled once it listens again. Close ends it.
func (s *Store) Changes(ctx context.Context, status func(error)) <-chan struct{} {
	cfg := s.pool.Config().ConnConfig
	// A channel is an identifier: it cannot be a bind parameter; quoted by
	// pgx, from a schema name and hex.
	listen := "LISTEN " + pgx.Identifier{Channel(s.schema)}.Sanitize()
	return s.watches.Start(ctx, status, func(ctx context.Context, changed func()) error {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return Translate(fmt.Errorf("listen: connect: %w", err))
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			conn.Close(cctx)
		}()
		if _, err := conn.Exec(ctx, listen); err != nil {
			return Translate(fmt.Errorf("listen: %w", err))
		}
		changed() // listening: whatever committed before is unknown
		for {
			wctx, cancel := context.WithTimeout(ctx, listenPing)
			_, err := conn.WaitForNotification(wctx)
			quiet := errors.Is(wctx.Err(), context.DeadlineExceeded)
			cancel()
			switch {
			case err == nil:
				changed()
			case ctx.Err() != nil:
				return ctx.Err()
			case quiet && !conn.IsClosed():
				pctx, cancel := context.WithTimeout(ctx, listenPing)
				err := conn.Ping(pctx)
				cancel()
				if err != nil {
					return Translate(fmt.Errorf("listen: ping: %w", err))
				}
			default:
				return Translate(fmt.Errorf("listen: %w", err))
			}
		}
	})
}
