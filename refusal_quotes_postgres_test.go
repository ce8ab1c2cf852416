package fairrelay_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// An enqueue naming another group than its flow's is refused with the same
// words on both backends: PostgreSQL quoted the names 'a' where SQLite says
// "a" (breakers' reports, twice; migration 035). The flow's name holds a
// double quote and a backslash, which both escape.
func TestPostgresGroupRefusalReadsAsSQLites(t *testing.T) {
	t.Parallel()
	const flow = `a"b\c`
	messages := map[string]string{}
	for name, dsn := range map[string]string{
		"sqlite":   filepath.Join(t.TempDir(), "q.db"),
		"postgres": pgtest.Schema(t, "frquote"),
	} {
		q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		if _, err := q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "e1", Flow: flow, Group: "g1", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
		_, err = q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "e2", Flow: flow, Group: "g2", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "group" {
			t.Fatalf("%s: enqueue under another group: %v, want invalid_input naming group", name, err)
		}
		messages[name] = fe.Message
	}
	if messages["sqlite"] != messages["postgres"] {
		t.Errorf("the refusal reads\n  %s on SQLite and\n  %s on PostgreSQL", messages["sqlite"], messages["postgres"])
	}
}
