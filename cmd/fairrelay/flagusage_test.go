package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// valueName is how a flag's help names its value: a placeholder in capitals
// (FILE, URL, TICK) or a type pflag derives (string, int, duration).
var valueName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// TestFlagHelpNamesValuesOnly walks every command's flags: pflag takes the
// first back-quoted word of a usage text as the name of the flag's value,
// so a command quoted in a usage text (`fairrelay migrate`) showed a bool
// flag as taking that command as its argument (--must-exist fairrelay
// migrate, a fresh user's report), and a user who typed it so got
// "unknown command". A bool flag has no value name, and any other flag's is
// one word.
func TestFlagHelpNamesValuesOnly(t *testing.T) {
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		check := func(f *pflag.Flag) {
			seen++
			name, _ := pflag.UnquoteUsage(f)
			if f.Value.Type() == "bool" && name != "" {
				t.Errorf("%s --%s: a bool flag whose help names a value %q (a back-quoted word in its usage text)", c.CommandPath(), f.Name, name)
			}
			if name != "" && !valueName.MatchString(name) {
				t.Errorf("%s --%s: its help names the value %q, not one word (a back-quoted phrase in its usage text)", c.CommandPath(), f.Name, name)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
		// A zero default is not printed (a fresh user: --shutdown-timeout
		// showed "(default: --timeout) (default 0s)").
		if u := c.LocalFlags().FlagUsages(); strings.Contains(u, "(default 0s)") {
			t.Errorf("%s: its help prints a zero duration's default:\n%s", c.CommandPath(), u)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	strictFlags(rootCmd) // as main wraps them
	walk(rootCmd)
	if seen < 100 {
		t.Fatalf("walked %d flags; want every command's (more than 100)", seen)
	}
}
