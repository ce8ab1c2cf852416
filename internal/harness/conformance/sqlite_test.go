package conformance

import "testing"

func TestSQLite(t *testing.T) {
	t.Parallel()
	Run(t, SQLite())
}
