package main

import "testing"

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
