package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// docBlock is a fenced example of a Markdown page: its language, the line
// its text starts on, and that text, unindented.
type docBlock struct {
	lang  string
	line  int
	lines []string
}

var fence = regexp.MustCompile("^( *)```(\\w*) *$")

// docBlocks returns the fenced blocks of a page's text that name a
// language.
func docBlocks(page string) []docBlock {
	var out []docBlock
	var cur *docBlock
	indent := ""
	for i, l := range strings.Split(page, "\n") {
		m := fence.FindStringSubmatch(l)
		switch {
		case cur == nil && m != nil && m[2] != "":
			cur, indent = &docBlock{lang: m[2], line: i + 2}, m[1]
		case cur != nil && m != nil && m[2] == "":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, strings.TrimPrefix(l, indent))
		}
	}
	return out
}

// What changes from run to run in an answer: wall-clock times, the
// relay's name (host:pid), the ticks of its log lines (its clock moves by
// the millisecond from the stored tick, so a loaded machine logs 10002 for
// 10000), column widths.
var docVarying = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`name=\S+`), "name=NAME"},
	{regexp.MustCompile(`\b(tick|clock_tick|acked_before)=\d+`), "$1=TICK"},
	{regexp.MustCompile(`\s+`), " "},
}

func docNormal(l string) string {
	for _, v := range docVarying {
		l = v.re.ReplaceAllString(l, v.with)
	}
	return strings.TrimSpace(l)
}

func docNormalAll(ls []string) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = docNormal(l)
	}
	return out
}

// Every example of docs/operations.md runs as written in an empty
// directory, with fairrelay on the PATH: each command of a console block
// prints what the page shows (but for times and the relay's name), and
// each command of an sh block succeeds. The PostgreSQL block runs against
// the tests' server, in fresh schemas. A command under timeout, which the
// page uses to stop a relay after a while, is stopped with SIGTERM once it
// printed the line the page shows before the signal: no waiting on the
// clock.
func TestOperationsExamplesRunAsWritten(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nFAIRRELAY_TEST_AS_CLI=1 exec '%s' \"$@\"\n", self)
	if err := os.WriteFile(filepath.Join(bin, "fairrelay"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, b := range docBlocks(string(page)) {
		switch b.lang {
		case "console":
			runConsoleBlock(t, b, env)
		case "sh":
			runShBlock(t, b, env)
		default:
			continue // SQL, log lines, results: not commands
		}
		ran++
	}
	if ran < 5 {
		t.Fatalf("ran %d example blocks of operations.md; the page has more", ran)
	}
}

// runShBlock runs the block's commands in one shell, in a fresh directory,
// and wants each to exit 0.
func runShBlock(t *testing.T, b docBlock, env []string) {
	t.Helper()
	script := strings.Join(b.lines, "\n")
	if strings.Contains(script, "export PG=") {
		script = regexp.MustCompile(`(?m)^export PG=.*$`).ReplaceAllString(script, "export PG='"+pgtest.URL(t)+"'")
		for _, name := range []string{"relay_inbox", "relay"} {
			fresh := pgtest.Schema(t, "frdocs")
			script = strings.ReplaceAll(script, "schema="+name+`"`, fresh[strings.LastIndex(fresh, "schema="):]+`"`)
		}
	}
	var checked strings.Builder
	for _, l := range strings.Split(script, "\n") {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		fmt.Fprintf(&checked, "%s\nrc=$?; if [ $rc != 0 ]; then echo %q exited $rc >&2; exit 1; fi\n", l, l)
	}
	cmd := exec.Command("bash", "-c", checked.String())
	cmd.Dir, cmd.Env = t.TempDir(), env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("operations.md, the sh block at line %d: %v\n%s", b.line, err, out)
	}
}

// runConsoleBlock runs each "$ " command of the block in a fresh
// directory, each in its own shell with $? set to the previous command's
// exit code, and compares stdout and stderr with the lines the page shows.
func runConsoleBlock(t *testing.T, b docBlock, env []string) {
	t.Helper()
	type step struct {
		cmd  string
		want []string
	}
	var steps []step
	for _, l := range b.lines {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			steps = append(steps, step{cmd: c})
		} else if len(steps) > 0 {
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
		}
	}
	dir, rc := t.TempDir(), 0
	for _, s := range steps {
		var got []string
		got, rc = runDocCommand(t, dir, env, s.cmd, rc, s.want)
		g, w := docNormalAll(got), docNormalAll(s.want)
		if timeoutPrefix.MatchString(s.cmd) {
			// The signal's own line and the relay's answer to it race.
			slices.Sort(g)
			slices.Sort(w)
		}
		if !slices.Equal(g, w) {
			t.Errorf("operations.md, the console block at line %d:\n$ %s\nprinted:\n%s\nthe page shows:\n%s",
				b.line, s.cmd, strings.Join(got, "\n"), strings.Join(s.want, "\n"))
		}
	}
}

var timeoutPrefix = regexp.MustCompile(`^timeout (--foreground )?\d+ `)

// runDocCommand runs one command in dir after the previous one exited
// prev, and returns its output lines and exit code.
func runDocCommand(t *testing.T, dir string, env []string, command string, prev int, want []string) ([]string, int) {
	t.Helper()
	stopAfter := ""
	if loc := timeoutPrefix.FindStringIndex(command); loc != nil {
		command = "exec " + command[loc[1]:]
		for i, w := range want {
			if (strings.HasPrefix(w, "fairrelay: terminated") || strings.Contains(w, `msg="stopping gracefully`)) && i > 0 {
				stopAfter = docNormal(want[i-1])
			}
		}
		if stopAfter == "" {
			t.Fatalf("%s: the page shows no line before the signal to wait for", command)
		}
	}
	// A bound, not a wait: a daemon the page leaves running would hang
	// the test.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", fmt.Sprintf("(exit %d)\n%s", prev, command))
	cmd.Dir, cmd.Env, cmd.WaitDelay = dir, env, time.Second
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var lines []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		lines = append(lines, s.Text())
		if stopAfter != "" && docNormal(s.Text()) == stopAfter {
			cmd.Process.Signal(syscall.SIGTERM)
			stopAfter = ""
		}
	}
	r.Close()
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Errorf("%s: still running after a minute; killed", command)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", command, err)
	}
	return lines, cmd.ProcessState.ExitCode()
}
