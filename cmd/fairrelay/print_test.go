package main

import (
	"bytes"
	"testing"
)

// printJSON writes one line: a URL's & < > as they are (json.Marshal would
// write \u0026, meant for JSON inside HTML), a control character escaped.
func TestPrintJSONOneReadableLine(t *testing.T) {
	var b bytes.Buffer
	if err := printJSON(&b, map[string]string{"from": "nats://h?a=1&b=<2>", "x": "bell\a"}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), `{"from":"nats://h?a=1&b=<2>","x":"bell\u0007"}`+"\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
}
