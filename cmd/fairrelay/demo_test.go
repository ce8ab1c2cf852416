package main

import "testing"

// The demo's header counts the flows its events go to, not --flows.
func TestDemoSpreadCountsTheFlowsUsed(t *testing.T) {
	for _, c := range []struct {
		events, flows int
		want          string
	}{
		{300, 20, "300 events over 20 flows"},
		{5, 10, "5 events over 5 flows"},
		{1, 10, "1 event over 1 flow"},
		{7, 1, "7 events over 1 flow"},
		{0, 20, "no events beside them"},
	} {
		if got := demoSpread(c.events, c.flows); got != c.want {
			t.Errorf("demoSpread(%d, %d) = %q, want %q", c.events, c.flows, got, c.want)
		}
	}
}
