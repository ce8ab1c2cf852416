package conformance

import (
	"testing"

	"github.com/fairrelay/fairrelay/internal/pgtest"
)

func TestPostgres(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	Run(t, Postgres())
}
