package fairrelay_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// An open that its context stops — a daemon told to stop while it creates
// or migrates its store — answers the context's error, not invalid_input
// or a database error: nothing about the path or URL is wrong (a new
// user's report: "invalid_input: queue: cannot open: migration
// 007_groups.sql: context canceled"). Queue and inbox, SQLite and
// PostgreSQL; then the same store opens and migrates with a live context.
func TestOpenStoppedByItsContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A queue and an inbox each need a place of their own.
	places := map[string][2]string{
		"sqlite":   {filepath.Join(dir, "q.db"), filepath.Join(dir, "inbox.db")},
		"postgres": {pgtest.Schema(t, "fropenstopped_"), pgtest.Schema(t, "fropenstoppedin_")},
	}
	for backend, dsns := range places {
		opens := map[string]func(ctx context.Context) error{
			"queue": func(ctx context.Context) error {
				q, err := fairrelay.Open(ctx, dsns[0], fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
				if err == nil {
					q.Close()
				}
				return err
			},
			"inbox": func(ctx context.Context) error {
				in, err := inbox.Open(ctx, dsns[1], inbox.Options{})
				if err == nil {
					in.Close()
				}
				return err
			},
		}
		for what, open := range opens {
			t.Run(backend+"/"+what, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				err := open(ctx)
				if !errors.Is(err, context.Canceled) || fairrelay.CodeOf(err) != "" {
					t.Fatalf("open with a stopped context: %v (code %q), want context.Canceled and no code", err, fairrelay.CodeOf(err))
				}
				if err := open(t.Context()); err != nil {
					t.Fatalf("open again with a live context: %v", err)
				}
			})
		}
	}
}
