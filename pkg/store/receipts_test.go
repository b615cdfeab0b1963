package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

func testReceipt(k events.SessionKey, outID, platMsg string) events.Receipt {
	return events.Receipt{OutID: outID, Platform: k.Platform, Bot: k.Bot, Scene: events.Scene{Type: k.Scope, ID: k.Scene},
		MessageID: platMsg, Time: time.Now().UnixMilli(), Content: events.Segments{events.TextSeg("reply " + outID)},
		Sender: events.Sender{ID: k.Bot}}
}

// publishReceiptMsg stores ev on subj of IM_SENT with one HeaderOutID value per id, as egress
// writes receipts.
func publishReceiptMsg(t testing.TB, js jetstream.JetStream, subj string, ev events.Any, ids ...string) {
	t.Helper()
	m, err := events.NewMsg(subj, ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		m.Header.Add(events.HeaderOutID, id)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// TestFindReceiptEveryLayout: a part's receipt is found wherever egress (or an earlier
// version) stored it: alone on the chat's subject, in a batch on its receipt bucket's subject
// (several chats in one message), or on the part's own subject; and a part without one is
// "not found", also when its bucket's subject holds other parts' batches.
func TestFindReceiptEveryLayout(t *testing.T) {
	js := startJS(t)
	ctx := context.Background()
	sent, err := js.Stream(ctx, events.StreamIMSent)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := testKey("ga"), testKey("gb"), testKey("gc")
	// Alone on the chat's subject.
	publishReceiptMsg(t, js, events.IMSentSubject(a), events.New(testReceipt(a, "t5-0", "pa")), "t5-0")
	// A batch across three chats in bucket 0, and one in bucket 1.
	publishReceiptMsg(t, js, events.IMSentBatchSubject(0), events.New(events.ReceiptBatch{Receipts: []events.Receipt{
		testReceipt(a, "t7-0", "pa7"), testReceipt(b, "t8-0", "pb8"), testReceipt(c, "t9-1", "pc9"),
	}}), "t7-0", "t8-0", "t9-1")
	publishReceiptMsg(t, js, events.IMSentBatchSubject(1), events.New(events.ReceiptBatch{Receipts: []events.Receipt{
		testReceipt(b, "t1024-0", "pb1024"), testReceipt(c, "t2047-0", "pc2047"),
	}}), "t1024-0", "t2047-0")
	// The layout before issue 41: the part's own subject.
	publishReceiptMsg(t, js, events.IMSentPartSubject(c, "t11-0"), events.New(testReceipt(c, "t11-0", "pc11")), "t11-0")
	// A non-turn out id (no bucket) alone on its chat's subject.
	publishReceiptMsg(t, js, events.IMSentSubject(b), events.New(testReceipt(b, "fork-x-0", "pfork")), "fork-x-0")

	for _, tc := range []struct {
		name    string
		k       events.SessionKey
		outID   string
		since   time.Time
		want    string // platform message id; "" = not found
		subject string
	}{
		{"alone on the chat's subject", a, "t5-0", time.Time{}, "pa", events.IMSentSubject(a)},
		{"first of a batch", a, "t7-0", time.Time{}, "pa7", events.IMSentBatchSubject(0)},
		{"middle of a batch, another chat", b, "t8-0", time.Time{}, "pb8", events.IMSentBatchSubject(0)},
		{"last of a batch, since set", c, "t9-1", time.Now().Add(-ReceiptSkew), "pc9", events.IMSentBatchSubject(0)},
		{"second bucket", c, "t2047-0", time.Time{}, "pc2047", events.IMSentBatchSubject(1)},
		{"per-part subject (before issue 41)", c, "t11-0", time.Time{}, "pc11", events.IMSentPartSubject(c, "t11-0")},
		{"no bucket", b, "fork-x-0", time.Time{}, "pfork", events.IMSentSubject(b)},
		{"not sent, its bucket holds others", a, "t6-0", time.Time{}, "", ""},
		{"not sent, another part of a batched turn", c, "t9-0", time.Time{}, "", ""},
		{"batched, but for another chat", a, "t8-0", time.Time{}, "", ""},
		{"stored before since", b, "t8-0", time.Now().Add(time.Hour), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FindReceipt(ctx, js, sent, tc.k, tc.outID, tc.since)
			if tc.want == "" {
				if !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatalf("FindReceipt = %+v, %v; want not found", f, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("FindReceipt: %v", err)
			}
			if !f.OK || f.Receipt.OutID != tc.outID || f.Receipt.MessageID != tc.want || f.Msg.Subject != tc.subject {
				t.Fatalf("found %+v on %s; want %s with %s on %s", f.Receipt, f.Msg.Subject, tc.outID, tc.want, tc.subject)
			}
		})
	}
}

// TestReceiptsDecodesBoth: Receipts reads a plain receipt and a batch alike; anything else
// gives none.
func TestReceiptsDecodesBoth(t *testing.T) {
	k := testKey("g")
	one := events.New(testReceipt(k, "t1-0", "p1"))
	batch := events.New(events.ReceiptBatch{Receipts: []events.Receipt{testReceipt(k, "t2-0", "p2"), testReceipt(k, "t3-0", "p3")}})
	out := events.New(events.Outbound{OutID: "t1-0", Platform: "qq", Bot: "bot1", Scene: events.Scene{Type: events.ScopeGroup, ID: "g"}, Content: events.Segments{events.TextSeg("x")}})
	for _, tc := range []struct {
		name string
		ev   events.Any
		want []string
	}{
		{"plain", one, []string{"t1-0"}},
		{"batch", batch, []string{"t2-0", "t3-0"}},
		{"not a receipt", out, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := events.NewMsg("im.sent.x", tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range Receipts(m.Subject, m.Header, m.Data) {
				got = append(got, r.OutID)
			}
			if len(got) != len(tc.want) || len(got) > 0 && got[len(got)-1] != tc.want[len(tc.want)-1] {
				t.Fatalf("Receipts = %v, want %v", got, tc.want)
			}
		})
	}
	if got := Receipts("im.sent.x", nats.Header{}, []byte("not json")); got != nil {
		t.Fatalf("garbage decoded to %v", got)
	}
}
