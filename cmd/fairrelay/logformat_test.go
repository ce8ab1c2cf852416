package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type shown struct{ s string }

func (v shown) String() string { return v.s }

// --log-format json writes one object per record; a duration reads as the
// text logs write it and a value with a String method as that string (the
// relay's settles mode was {} before), an error as its message.
func TestJSONLogValues(t *testing.T) {
	var b bytes.Buffer
	log, err := newLogger(&b, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("relay: started", "timeout", 10*time.Second, "settles", shown{"with the claims"}, "err", errors.New("boom"), "n", 3)
	log.Debug("below the level")
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, b.String())
	}
	delete(got, "time")
	want := map[string]any{"level": "INFO", "msg": "relay: started", "timeout": "10s", "settles": "with the claims", "err": "boom", "n": float64(3)}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("JSON record (-want +got):\n%s", d)
	}
	b.Reset()
	log, err = newLogger(&b, "warn", "text")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("x", "timeout", time.Second)
	if !strings.Contains(b.String(), "level=WARN msg=x timeout=1s") {
		t.Errorf("text record: %q", b.String())
	}
	for _, tc := range []struct{ level, format, field string }{{"loud", "json", "log-level"}, {"info", "logfmt", "log-format"}, {"info", "", "log-format"}} {
		if _, err := newLogger(&b, tc.level, tc.format); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("newLogger(%q, %q): %v, want an error naming %s", tc.level, tc.format, err, tc.field)
		}
	}
}

// receive logs --max-delta 0 (no limit) as "none": a fresh user read
// max_delta=0 as every delta refused.
func TestReceiveLogsNoDeltaLimitAsNone(t *testing.T) {
	if got := deltaLimit(0); got != "none" {
		t.Errorf("deltaLimit(0) = %v, want none", got)
	}
	if got := deltaLimit(5); got != int64(5) {
		t.Errorf("deltaLimit(5) = %v, want 5", got)
	}
}
