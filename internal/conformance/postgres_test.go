package conformance

import (
	"testing"

	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// postgresBackend gives every test two fresh schemas on the test server (see
// package pgtest), dropped when the test ends.
func postgresBackend() Backend {
	return Backend{
		Name: "postgres",
		New: func(t *testing.T) (string, string) {
			return pgtest.Schema(t, "frc_q"), pgtest.Schema(t, "frc_i")
		},
		RejectInserts: func(t *testing.T, dsn, table string) {
			t.Helper()
			// table is one of the suite's own table names, never user input.
			pgtest.Exec(t, dsn, `
CREATE OR REPLACE FUNCTION reject_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'rejected by test trigger'; END $$;
CREATE TRIGGER reject_`+table+` BEFORE INSERT ON `+table+` FOR EACH ROW EXECUTE FUNCTION reject_insert();`)
		},
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	Run(t, postgresBackend())
}
