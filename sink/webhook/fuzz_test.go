package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// FuzzVerifier: a genuinely signed delivery verifies, and no tampering with
// it does — a changed body byte, an extra body byte, a webhook-id naming
// another flow or seq, another timestamp within the tolerance; the signed
// id, flow and seq read back as sent; a Fairrelay-* header that differs
// from them is refused by the receiver; and headers of any content never
// make Verify or ParseMessageID panic. Seeds: f.Add below and
// testdata/fuzz/FuzzVerifier.
func FuzzVerifier(f *testing.F) {
	f.Add("A1", "A", int64(1), []byte(`{"delta":1}`), uint8(0), uint(0), byte(1), "v1,xyz")
	f.Add("order.7", "shop/é", int64(12), []byte{}, uint8(1), uint(3), byte(0x80), "")
	f.Add("a:b%", "50%:x", int64(1<<62), []byte("\x00\xff"), uint8(2), uint(1), byte(0), "v1,"+webhook.Sign([]byte("k"), "fr1:A1:A:1", time.Unix(1_700_000_000, 0), nil))
	f.Add("", "", int64(-5), []byte(`x`), uint8(3), uint(9), byte(7), "v2,a v1,b")
	key := []byte("fuzz key")
	now := time.Unix(1_700_000_000, 0)
	v := webhook.NewVerifier(key)
	v.Now = func() time.Time { return now }
	f.Fuzz(func(t *testing.T, id, flow string, seq int64, body []byte, how uint8, pos uint, b byte, junk string) {
		// Arbitrary headers: an error, never a panic.
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, flow)
		h.Set(webhook.HeaderSignature, junk)
		_ = v.Verify(h, body)
		if gotID, gotFlow, gotSeq, err := webhook.ParseMessageID(junk); err == nil && webhook.MessageID(gotID, gotFlow, gotSeq) != junk {
			t.Fatalf("ParseMessageID(%q) accepted a non-canonical id", junk)
		}

		if id == "" || flow == "" || seq < 1 {
			return // not an event the sink could send
		}
		msgID := webhook.MessageID(id, flow, seq)
		if gotID, gotFlow, gotSeq, err := webhook.ParseMessageID(msgID); err != nil || gotID != id || gotFlow != flow || gotSeq != seq {
			t.Fatalf("MessageID(%q, %q, %d) = %q reads back as %q %q %d %v", id, flow, seq, msgID, gotID, gotFlow, gotSeq, err)
		}
		signed := func(msgID string, ts time.Time, body []byte) http.Header {
			h := http.Header{}
			h.Set(webhook.HeaderID, msgID)
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
			h.Set(webhook.HeaderSignature, webhook.Sign(key, msgID, ts, body))
			return h
		}
		genuine := signed(msgID, now, body)
		if err := v.Verify(genuine, body); err != nil {
			t.Fatalf("a genuine delivery: %v", err)
		}

		// Tamper with what was signed, keeping the signature.
		h = genuine.Clone()
		tampered := append([]byte(nil), body...)
		switch how % 5 {
		case 0: // change a byte of the body
			if len(tampered) == 0 {
				tampered = []byte{b}
			} else {
				tampered[pos%uint(len(tampered))] ^= b | 1
			}
		case 1: // append to the body
			tampered = append(tampered, b)
		case 2: // another flow
			h.Set(webhook.HeaderID, webhook.MessageID(id, flow+string(rune('a'+b%26)), seq))
		case 3: // another seq
			next := seq + 1 + int64(b)
			if next < 1 {
				next = 1
			}
			if next == seq {
				next = seq - 1
			}
			h.Set(webhook.HeaderID, webhook.MessageID(id, flow, next))
		case 4: // another timestamp, within the tolerance
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix()+1+int64(b%60), 10))
		}
		if err := v.Verify(h, tampered); err == nil {
			t.Fatalf("tampered delivery (%d) verified: headers %v body %q", how%5, h, tampered)
		}

		// The plain headers must agree with the signed webhook-id.
		h = genuine.Clone()
		h.Set(webhook.HeaderFlow, flow+"x")
		if _, err := inbox.DeliveryFromHeader(h, body); !errors.Is(err, webhook.ErrMetadata) {
			if _, rerr := inbox.DeliveryFromHeader(genuine, body); rerr == nil {
				t.Fatalf("a Fairrelay-Flow that differs from the signed flow: %v", err)
			}
		}
	})
}
