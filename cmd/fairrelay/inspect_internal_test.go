package main

import (
	"testing"

	"github.com/fairrelay/fairrelay"
)

// A paging hint pastes back into a shell as the one word it names.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"F01":         "F01",
		"tenant/42":   "tenant/42",
		"a b":         "'a b'",
		"it's":        `'it'\''s'`,
		"$HOME":       "'$HOME'",
		"":            "''",
		"ünïcode-id":  "'ünïcode-id'",
		"a\x1b[2J'":   `$'a\x1b[2J\''`,
		"R\u202e\xff": `$'R\xe2\x80\xae\xff'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// DUE shows a head's tick and how far it is past the stored tick on the
// daemon clock, or that the stored tick has reached it.
func TestDueFromTheStoredTick(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		e      fairrelay.EventState
		stored int64
		want   string
	}{
		{fairrelay.EventState{NextAt: i64(869)}, 0, "next_at 869 (stored +900ms)"},
		{fairrelay.EventState{NextAt: i64(556923)}, 549734, "next_at 556923 (stored +7.2s)"},
		{fairrelay.EventState{NextAt: i64(400000)}, 100000, "next_at 400000 (stored +5m0s)"},
		{fairrelay.EventState{NextAt: i64(10)}, 10, "next_at 10 (due now)"},
		{fairrelay.EventState{NextAt: i64(10)}, 5000, "next_at 10 (due now)"},
		{fairrelay.EventState{LeaseUntil: i64(30000)}, 1000, "lease_until 30000 (stored +29s)"},
		{fairrelay.EventState{LeaseUntil: i64(30000)}, 30001, "lease_until 30000 (ended)"},
		{fairrelay.EventState{}, 7, "-"},
	} {
		if got := due(c.e, c.stored); got != c.want {
			t.Errorf("due(%+v, %d) = %q, want %q", c.e, c.stored, got, c.want)
		}
	}
}
