package main

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// strictFlags makes every flag of c and its commands strict in two ways
// pflag is not (a breaker's report):
//
//   - An integer is written as JSON writes one: decimal digits, no leading
//     0, a minus sign only. pflag reads an integer in any base Go's syntax
//     names, so --at 0100 wrote at tick 64, and 0x10, 0b1 and 1_000 were
//     ticks, generations and limits too; --delta and the JSON lines' numbers
//     already refused 05 and +3.
//   - A flag is given at most once. pflag keeps the last value, so
//     "pause --queue a.db --queue b.db" paused a flow of b.db and "settle
//     --outcome retry --outcome accepted" acked the event, without a word;
//     a URL parameter given twice was already refused for the same reason
//     (easy to get by appending). Flags meant to repeat (a list:
//     --previous-secret) keep doing so.
//
// A refused value is a flag-parse error, which flagError turns into
// invalid_input naming the flag. main calls it once the commands exist.
func strictFlags(c *cobra.Command) {
	wrap := func(f *pflag.Flag) {
		if _, done := f.Value.(*strictValue); done {
			return
		}
		t := f.Value.Type()
		if strings.HasSuffix(t, "Slice") || strings.HasSuffix(t, "Array") {
			return
		}
		f.Value = &strictValue{Value: f.Value, integer: strings.HasPrefix(t, "int")}
		if t == "duration" && f.DefValue == "0s" {
			// pflag knows "0s" for zero only on its own duration type:
			// wrapped, the help said "(default 0s)" after every zero
			// duration, beside texts such as "(default: --timeout)".
			f.DefValue = "0"
		}
	}
	c.PersistentFlags().VisitAll(wrap)
	c.Flags().VisitAll(wrap)
	for _, sub := range c.Commands() {
		strictFlags(sub)
	}
}

// strictValue is a flag's value that refuses a second Set and, for an
// integer, any text but a JSON integer (decimal digits, no leading 0, an
// optional minus sign).
type strictValue struct {
	pflag.Value
	integer bool
	set     bool
}

var decimalInteger = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

func (v *strictValue) Set(s string) error {
	if v.set {
		return errors.New("given twice: give it once")
	}
	if v.integer {
		// strconv's errors, which badValue words for the flag.
		if !decimalInteger.MatchString(s) {
			return &strconv.NumError{Func: "ParseInt", Num: s, Err: strconv.ErrSyntax}
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		// The wrapped value parses in any base: give it the number in its
		// plainest form ("-0" is 0).
		s = strconv.FormatInt(n, 10)
	}
	if err := v.Value.Set(s); err != nil {
		return err
	}
	v.set = true
	return nil
}
