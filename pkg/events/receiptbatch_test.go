package events

import (
	"testing"
)

func TestReceiptBucket(t *testing.T) {
	for _, tc := range []struct {
		outID  string
		bucket uint64
		ok     bool
	}{
		{"t0-0", 0, true},
		{"t1023-3", 0, true},
		{"t1024-0", 1, true},
		{"t5000000-12", 5000000 / ReceiptBucketTurns, true},
		{"t-0", 0, false},                     // no number
		{"t12", 0, false},                     // no part
		{"turnB-0", 0, false},                 // a turn id that is not t<number>
		{"x12-0", 0, false},                   // not a turn worker's
		{"t1a-0", 0, false},                   // not a number
		{"t99999999999999999999-0", 0, false}, // overflows
	} {
		b, ok := ReceiptBucket(tc.outID)
		if b != tc.bucket || ok != tc.ok {
			t.Errorf("ReceiptBucket(%q) = %d, %v; want %d, %v", tc.outID, b, ok, tc.bucket, tc.ok)
		}
	}
}

func TestReceiptBatchValidateAndMsgID(t *testing.T) {
	r := func(id string) Receipt {
		return Receipt{OutID: id, Platform: "qq", Bot: "b", Scene: Scene{Type: ScopeGroup, ID: "g"}, MessageID: "p" + id, Time: 1, Sender: Sender{ID: "b"}}
	}
	for _, tc := range []struct {
		name string
		b    ReceiptBatch
		ok   bool
	}{
		{"one bucket", ReceiptBatch{Receipts: []Receipt{r("t1-0"), r("t1023-1")}}, true},
		{"empty", ReceiptBatch{}, false},
		{"two buckets", ReceiptBatch{Receipts: []Receipt{r("t1-0"), r("t1024-0")}}, false},
		{"no bucket", ReceiptBatch{Receipts: []Receipt{r("x-0"), r("x-1")}}, false},
		{"an invalid receipt", ReceiptBatch{Receipts: []Receipt{r("t1-0"), {OutID: "t2-0"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok %v", err, tc.ok)
			}
		})
	}
	ab := ReceiptBatch{Receipts: []Receipt{r("t1-0"), r("t2-0")}}
	ac := ReceiptBatch{Receipts: []Receipt{r("t1-0"), r("t3-0")}}
	if ab.MsgID() != (ReceiptBatch{Receipts: []Receipt{r("t1-0"), r("t2-0")}}).MsgID() {
		t.Error("the same batch has two dedupe ids")
	}
	if ab.MsgID() == ac.MsgID() {
		t.Errorf("two batches that start alike share the dedupe id %q", ab.MsgID())
	}
}

func TestIMSentBatchSubject(t *testing.T) {
	k := SessionKey{Platform: "batch", Bot: "b", Scope: ScopeGroup, Scene: "g"}
	for subj, want := range map[string]bool{
		IMSentBatchSubject(0): true, IMSentBatchSubject(4711): true,
		IMSentSubject(k): false, "im.sent.batch.": false, "im.sent.batch.x": false,
	} {
		if got := IsIMSentBatchSubject(subj); got != want {
			t.Errorf("IsIMSentBatchSubject(%q) = %v", subj, got)
		}
	}
	if _, err := ParseIMSentSubject(IMSentBatchSubject(3)); err == nil {
		t.Error("a batch subject parses as a chat's")
	}
}
