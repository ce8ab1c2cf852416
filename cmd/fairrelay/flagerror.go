package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fairrelay/fairrelay"
)

// Every command's flag-parse errors (an unknown flag, a value that does not
// parse, a flag without its value) come out like the commands' own input
// errors: invalid_input naming the flag, exit code exitFailed. Subcommands
// inherit the root's function.
func init() { rootCmd.SetFlagErrorFunc(flagError) }

// flagError turns an error of pflag's parser into a fairrelay.Error with
// CodeInvalidInput whose field is the flag's name, as the user wrote it
// for a flag that does not exist.
func flagError(cmd *cobra.Command, err error) error {
	if errors.Is(err, pflag.ErrHelp) {
		return err // cobra prints the help
	}
	if args := cmd.Flags().Args(); cmd.HasSubCommands() && len(args) > 0 {
		// "fairrelay claimm --queue q.db": the misspelt command, not the
		// flags the group of commands does not take, is what went wrong.
		return unknownCommand(cmd, args[0])
	}
	var (
		bad      *pflag.InvalidValueError
		noValue  *pflag.ValueRequiredError
		unknown  *pflag.NotExistError
		badShape *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &bad):
		f := bad.GetFlag()
		return fairrelay.InvalidInput(f.Name, "%s", badValue(f, bad.GetValue(), errors.Unwrap(bad)))
	case errors.As(err, &noValue):
		name := noValue.GetFlag().Name
		return fairrelay.InvalidInput(name, "needs a value: give --%s VALUE", name)
	case errors.As(err, &unknown):
		name, dashes := unknown.GetSpecifiedName(), "--"
		if unknown.GetSpecifiedShortnames() != "" {
			dashes = "-"
		}
		return fairrelay.InvalidInput(name, "unknown flag %s%s for %s (%s --help lists its flags)", dashes, name, cmd.CommandPath(), cmd.CommandPath())
	case errors.As(err, &badShape):
		spec := badShape.GetSpecifiedFlag()
		name := strings.TrimLeft(spec, "-")
		if i := strings.IndexByte(name, '='); i >= 0 {
			name = name[:i]
		}
		if name == "" {
			name = "flags"
		}
		return fairrelay.InvalidInput(name, "bad flag syntax %q: write --NAME VALUE or --NAME=VALUE", spec)
	}
	return fairrelay.InvalidInput("flags", "%v", err)
}

// badValue says why value is not one of f's: for the value types of
// package strconv and time, in words rather than the parser's; for the
// project's own flag types, their own message.
func badValue(f *pflag.Flag, value string, cause error) string {
	var num *strconv.NumError
	if errors.As(cause, &num) {
		want := "an integer"
		if otherBase.MatchString(value) {
			// 0x10, 0b1, 1_000, 0100, +3: Go's syntax, refused
			// (strictFlags).
			want = "an integer as JSON writes one (decimal, no leading 0 or +)"
		}
		switch t := f.Value.Type(); {
		case t == "bool":
			return fmt.Sprintf("%q is not true or false", value)
		case strings.HasPrefix(t, "float"):
			want = "a number"
		case strings.HasPrefix(t, "uint"):
			want = "a non-negative integer"
		}
		if errors.Is(num.Err, strconv.ErrRange) {
			return fmt.Sprintf("%q is out of range for %s", value, want)
		}
		if tickFlags[f.Name] {
			// --acked-before 5m, --at $(date +%s%3N)'s typo: a tick is
			// not a duration or a wall-clock time.
			return fmt.Sprintf("%q is not %s: a tick of the store's logical clock (1 tick = 1 ms of a running relay; `fairrelay inspect --queue Q clock` shows the store's tick)", value, want)
		}
		return fmt.Sprintf("%q is not %s", value, want)
	}
	if cause == nil {
		return fmt.Sprintf("%q is not a valid value", value)
	}
	if f.Value.Type() == "duration" && strings.HasPrefix(cause.Error(), "time: ") {
		if hint := durationHint(value); hint != "" {
			return hint
		}
		return fmt.Sprintf("%q is not a duration such as 30s, 5m or 1500ms", value)
	}
	return cause.Error()
}

// otherBase matches an integer written in Go's syntax for another base,
// with digit separators, a leading 0 or a plus sign, which strictFlags
// refuses.
var otherBase = regexp.MustCompile(`^[+-]?0[0-9xXoObB_]|_|^\+[0-9]`)

// tickFlags are the integer flags whose value is a tick of the store's
// clock (SPEC §1): badValue says so, since a duration ("5m") is the usual
// mistake. (Counts of ticks, script's --lease or --max-tick-jump, are not
// ticks of a store's clock.)
var tickFlags = map[string]bool{"at": true, "acked-before": true, "ids-before": true}

// argsAsInput makes the argument errors of c and every command under it
// (an unknown command, too many or too few arguments: cobra's own text,
// and for a command that only groups others, its help with exit code 0)
// come out as input errors too: invalid_input naming "command" or "args",
// exit code exitFailed; and it refuses an explicitly empty flag of
// nonEmptyFlags (refuseEmptyFlags). main runs it once every command is
// added.
func argsAsInput(c *cobra.Command) {
	for _, sub := range c.Commands() {
		argsAsInput(sub)
	}
	if c.PreRunE == nil {
		c.PreRunE = refuseEmptyFlags
	}
	if !c.Runnable() && c.HasSubCommands() {
		// A group of commands: its help without arguments, else an unknown
		// command.
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return cmd.Help()
		}
		return
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				if cmd.HasSubCommands() && len(args) > 0 {
					return unknownCommand(cmd, args[0]) // console tokn
				}
				// cobra's words quote an argument (unknown command "…"):
				// a URL's password is hidden there as everywhere else.
				msg := err.Error()
				for _, a := range args {
					msg = strings.ReplaceAll(msg, a, redactDSN(a))
				}
				if a, flag := storeArg(cmd, args); a != "" {
					// A store given as an argument, as sqlite3 and psql take
					// theirs (a fresh user's `inspect URL heads`).
					return fairrelay.InvalidInput("args", "%s: %q looks like a store; give it with --%s (%s --help shows its usage)", msg, redactDSN(a), flag, cmd.CommandPath())
				}
				return fairrelay.InvalidInput("args", "%s (%s --help shows its usage)", msg, cmd.CommandPath())
			}
			return nil
		}
	}
}

// storeArg returns the first of args that looks like a store — a URL
// (postgres://, postgresql://, file:) or a name ending in .db, .sqlite or
// .sqlite3 — and the flag of cmd that takes it (queue, else inbox); "" when
// none does or cmd has neither flag.
func storeArg(cmd *cobra.Command, args []string) (arg, flag string) {
	switch {
	case cmd.Flags().Lookup("queue") != nil:
		flag = "queue"
	case cmd.Flags().Lookup("inbox") != nil:
		flag = "inbox"
	default:
		return "", ""
	}
	for _, a := range args {
		l := strings.ToLower(a)
		for _, p := range []string{"postgres://", "postgresql://", "file:"} {
			if strings.HasPrefix(l, p) {
				return a, flag
			}
		}
		for _, x := range []string{".db", ".sqlite", ".sqlite3"} {
			if strings.HasSuffix(l, x) {
				return a, flag
			}
		}
	}
	return "", ""
}

// unknownCommand is the input error of name given where cmd, a group of
// commands, expects one of its commands.
func unknownCommand(cmd *cobra.Command, name string) error {
	return fairrelay.InvalidInput("command", "unknown command %q for %s (%s --help lists its commands)", redactDSN(name), cmd.CommandPath(), cmd.CommandPath())
}

// nonEmptyFlags are the string flags whose empty value would silently mean
// "not given" and widen what a command does: redrive --all --flow "$F"
// with F unset would redrive every flow, enqueue --group "" would put the
// flow in no group, --secret "" would sign nothing, --tokens "" would drop
// the console's sign-in, console --inbox "" would drop the inbox's page,
// relay --name "" and --permanent-status "" would mean the defaults, receive
// --from "" would listen instead of consuming. Given explicitly, each must
// hold something (a breaker's sweep found the last four taken as unset).
// (--reason is not here: an empty reason is SPEC §2's empty_reason answer.)
// The one environment variable that feeds such a flag, $FAIRRELAY_SECRET,
// is refused set but empty likewise (secretFlag).
var nonEmptyFlags = []string{"flow", "reason-is", "group", "operator", "secret", "tokens", "auth-header",
	"readonly-users", "queue", "inbox", "from", "name", "permanent-status", "sink"}

// refuseEmptyFlags is every command's PreRunE (main sets it): a flag of
// nonEmptyFlags given as "" is invalid input naming it, and so is a
// negative --acked-before or --ids-before (a tick is a non-negative
// integer, SPEC §1; with an --at behind the store's tick the clock's
// answer comes first, clockBeforeFields).
//
// A negative --at is not refused here: it is below every stored tick, and
// SPEC §2 answers a write's tick below the stored one clock_regressed
// before it looks at any field, as the library and the script do (the
// command line said invalid_input naming at). Only --at
// -9223372036854775808 is answered here, as clock_regressed: it is the
// library's AtStored, which would run the write at the store's tick.
func refuseEmptyFlags(cmd *cobra.Command, _ []string) error {
	for _, name := range nonEmptyFlags {
		f := cmd.Flags().Lookup(name)
		if f != nil && f.Changed && f.Value.Type() == "string" && f.Value.String() == "" {
			return fairrelay.InvalidInput(name, "must not be empty (given as \"\")")
		}
	}
	for name := range tickFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed || f.Value.Type() != "int64" {
			continue
		}
		v, err := strconv.ParseInt(f.Value.String(), 10, 64)
		switch {
		case err != nil || v >= 0:
		case name != "at":
			return fairrelay.InvalidInput(name, "must be a tick in [0, %d], got %d", int64(fairrelay.MaxTick), v)
		case v == fairrelay.AtStored:
			return &fairrelay.Error{Code: fairrelay.CodeClockRegressed, Message: fmt.Sprintf("%s at tick %d: below every store's tick (a tick is non-negative)", cmd.Name(), v)}
		}
	}
	return nil
}
