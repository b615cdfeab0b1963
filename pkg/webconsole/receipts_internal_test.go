package webconsole

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

func storeMsg(t *testing.T, js jetstream.JetStream, subj string, ev events.Any, outIDs ...string) {
	t.Helper()
	m, err := events.NewMsg(subj, ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range outIDs {
		m.Header.Add(events.HeaderOutID, id)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// TestConversationReadsBatchedReceipts: the session page marks a part sent wherever its receipt
// is: alone on the chat's subject, in a batch on its receipt bucket's subject (issue 40), or on
// the part's own subject (before issue 41); a part without one, or named only by a batch of
// another chat's receipts, is not.
func TestConversationReadsBatchedReceipts(t *testing.T) {
	ctx := context.Background()
	js := natstest.New(t).JS
	k := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: events.ScopeGroup, Scene: "g1"}
	other := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: events.ScopeGroup, Scene: "g2"}
	rcpt := func(k events.SessionKey, out string) events.Receipt {
		return events.Receipt{OutID: out, Platform: k.Platform, Bot: k.Bot, Scene: events.Scene{Type: k.Scope, ID: k.Scene},
			MessageID: "p-" + out, Time: time.Now().UnixMilli(), Sender: events.Sender{ID: k.Bot}}
	}
	parts := []string{"t1-0", "t2-0", "t2-1", "t3-0", "t1500-0", "t4-0", "t5-0"}
	for _, id := range parts {
		out := events.Outbound{OutID: id, Turn: id[:len(id)-2], Platform: k.Platform, Bot: k.Bot, Scene: events.Scene{Type: k.Scope, ID: k.Scene},
			Content: events.Segments{events.TextSeg("reply " + id)}}
		storeMsg(t, js, events.IMOutSubject(k), events.New(out))
	}
	storeMsg(t, js, events.IMSentSubject(k), events.New(rcpt(k, "t1-0")), "t1-0")
	storeMsg(t, js, events.IMSentBatchSubject(0), events.New(events.ReceiptBatch{Receipts: []events.Receipt{
		rcpt(other, "t9-0"), rcpt(k, "t2-0"), rcpt(k, "t2-1")}}), "t9-0", "t2-0", "t2-1")
	storeMsg(t, js, events.IMSentBatchSubject(1), events.New(events.ReceiptBatch{Receipts: []events.Receipt{
		rcpt(k, "t1500-0"), rcpt(other, "t1501-0")}}), "t1500-0", "t1501-0")
	storeMsg(t, js, events.IMSentPartSubject(k, "t3-0"), events.New(rcpt(k, "t3-0")), "t3-0")
	// t5-0 is named by a batch, but of another chat (a receipt of that chat's t5-0).
	storeMsg(t, js, events.IMSentBatchSubject(0), events.New(events.ReceiptBatch{Receipts: []events.Receipt{
		rcpt(other, "t5-0"), rcpt(other, "t6-0")}}), "t5-0", "t6-0")

	r, err := NewReader(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	src, err := r.fetch(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		outID string
		sent  bool
	}{
		{"t1-0", true},    // alone on the chat's subject
		{"t2-0", true},    // in a batch with another chat's receipt
		{"t2-1", true},    // the same batch
		{"t1500-0", true}, // bucket 1
		{"t3-0", true},    // per-part subject
		{"t4-0", false},   // no receipt anywhere
		{"t5-0", false},   // only another chat's receipt of the same id
	} {
		if src.sent[tc.outID] != tc.sent {
			t.Errorf("%s: sent %v, want %v", tc.outID, src.sent[tc.outID], tc.sent)
		}
	}
}
