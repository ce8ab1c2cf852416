package topic_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/sink/topic"
)

func TestEncodeFlow(t *testing.T) {
	t.Parallel()
	for flow, want := range map[string]string{
		"order-42":    "order-42",
		"A_b-9":       "A_b-9",
		"orders/eu.7": "orders%2Feu%2E7",
		"café":        "caf%C3%A9",
		"a b*c>d#e":   "a%20b%2Ac%3Ed%23e",
		"%41":         "%2541",
		"~":           "%7E",
	} {
		if got := topic.EncodeFlow(flow); got != want {
			t.Errorf("EncodeFlow(%q) = %q, want %q", flow, got, want)
		}
		back, err := topic.DecodeFlow(want)
		if err != nil || back != flow {
			t.Errorf("DecodeFlow(%q) = %q, %v; want %q", want, back, err, flow)
		}
	}
	for _, bad := range []string{"a.b", "%4", "%4g", "%zz", "a b", "%"} {
		if _, err := topic.DecodeFlow(bad); err == nil {
			t.Errorf("DecodeFlow(%q) succeeded", bad)
		}
	}
}

// The token is one subject token for every flow, and no two flows share one.
func FuzzEncodeFlow(f *testing.F) {
	for _, s := range []string{"A", "order-42", "a.b", "%41", "é", " ", ">"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, flow string) {
		if flow == "" || !utf8.ValidString(flow) {
			return
		}
		tok := topic.EncodeFlow(flow)
		if tok == "" || strings.ContainsAny(tok, ".*>#{} \t\r\n") {
			t.Fatalf("EncodeFlow(%q) = %q: not one token", flow, tok)
		}
		back, err := topic.DecodeFlow(tok)
		if err != nil || back != flow {
			t.Fatalf("DecodeFlow(EncodeFlow(%q)) = %q, %v", flow, back, err)
		}
	})
}

func TestTemplate(t *testing.T) {
	t.Parallel()
	tpl, err := topic.Parse("subject", "fairrelay.{flow}.v1.{flow}")
	if err != nil {
		t.Fatal(err)
	}
	if got := tpl.Expand("a.b"); got != "fairrelay.a%2Eb.v1.a%2Eb" {
		t.Errorf("Expand = %q", got)
	}
	if got := tpl.Literal("*"); got != "fairrelay.*.v1.*" {
		t.Errorf("Literal = %q", got)
	}
	if !tpl.HasFlow() || tpl.String() != "fairrelay.{flow}.v1.{flow}" {
		t.Errorf("HasFlow %v, String %q", tpl.HasFlow(), tpl.String())
	}
	fixed, err := topic.Parse("subject", "orders")
	if err != nil || fixed.HasFlow() || fixed.Expand("A") != "orders" {
		t.Errorf("a template without the placeholder: %v %v %q", err, fixed.HasFlow(), fixed.Expand("A"))
	}
	for _, bad := range []string{"fairrelay.{Flow}", "x.{flow", "x.}", "{id}"} {
		_, err := topic.Parse("subject", bad)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != "subject" || fe.Code != fairrelay.CodeInvalidInput {
			t.Errorf("Parse(%q): %v, want invalid_input naming subject", bad, err)
		}
	}
}

// A consumer's wildcard stands for whole tokens only: a placeholder inside
// a token ("hbx.p{flow}") made a consumer subscribe to "hbx.p*", which a
// broker reads as literal text, so its stream caught none of the relay's
// messages and the relay quarantined every event (a breaker's report).
func TestCheckWildcard(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"{flow}", "fairrelay.{flow}", "{flow}.v1", "a.{flow}.b.{flow}", "{flow}.{flow}", "orders"} {
		tpl, err := topic.Parse("subject", good)
		if err != nil {
			t.Fatal(err)
		}
		if err := tpl.CheckWildcard("subject"); err != nil {
			t.Errorf("%q: %v, want nil", good, err)
		}
	}
	for _, bad := range []string{"hbx.p{flow}", "{flow}x", "a.{flow}-v1.b", "{flow}{flow}", "a.{flow}.b{flow}"} {
		tpl, err := topic.Parse("routing_key", bad)
		if err != nil {
			t.Fatal(err)
		}
		var fe *fairrelay.Error
		if err := tpl.CheckWildcard("routing_key"); !errors.As(err, &fe) || fe.Field != "routing_key" || fe.Code != fairrelay.CodeInvalidInput {
			t.Errorf("%q: %v, want invalid_input naming routing_key", bad, err)
		}
	}
}
