package egress

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/store"
)

// waitFor polls cond (off the test goroutine: a hook) until it holds or within passed.
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// chatsOnOwnLanes returns n scene ids whose IM_OUT subjects fall in n different lanes of an
// egress with the given concurrency, so that no part waits in a lane behind another.
func chatsOnOwnLanes(n, lanes int) []string {
	var ids []string
	used := map[uint32]bool{}
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("g%d", i)
		k := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "group", Scene: id}
		l := fnv32a(events.IMOutSubject(k)) % uint32(lanes)
		if !used[l] {
			used[l] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// TestGroupCommittedReceipts: parts egress sent while a receipt write was in flight are
// recorded together (one message per receipt bucket, a bucket's lone part and a part without a
// bucket on its chat's subject), every part's receipt is found (store.FindReceipt) and keeps
// the part from being sent again by a recreated consumer; a part whose egress was killed between
// the platform's 2xx and the write has no receipt and is sent again (the documented window),
// while the receipts of the others, written in a batch, hold.
func TestGroupCommittedReceipts(t *testing.T) {
	// Six parts of receipt bucket 0, one of bucket 1, one without a bucket; each in a chat of its own.
	ids := []string{"t100-0", "t101-0", "t102-0", "t103-1", "t104-0", "t105-0", "t1030-0", "turnX-0"}
	for _, tc := range []struct {
		name   string
		killed string // the part whose egress dies between its 2xx and its receipt write
		big    bool   // parts so large that a batch of them is written as plain receipts
	}{
		{"all recorded", "", false},
		{"killed between the 2xx and the batch write", "t104-0", false},
		{"too large for one batch", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.New(t)
			cb := newCallback(t, nil)
			o := fastOptions(srv, testConfig(cb), t)
			// Its own connection, so that "killing" it cuts only this egress.
			nc, js := srv.Connect(t)
			o.NC, o.JS = nc, js
			recorded := len(ids)
			if tc.killed != "" {
				recorded--
			}
			var first *Handle
			held := false
			o.beforeWrite = func(n int) {
				if held {
					return
				}
				held = true
				// Hold the first write until every other part waits for its receipt: they
				// are then written together after it.
				if !waitFor(10*time.Second, func() bool { return first.e.receipts.pending() == recorded-n }) {
					t.Errorf("the other receipts never queued (%d pending)", first.e.receipts.pending())
				}
			}
			o.beforeRecord = func(out events.Outbound) bool {
				if out.OutID != tc.killed {
					return false
				}
				// Dies once the others are stored: no ack, no receipt, no more bus requests.
				waitFor(10*time.Second, func() bool { _, n := first.e.receipts.stats(); return n == uint64(recorded) })
				first.subConn.Close()
				nc.Close()
				return true
			}
			first = start(t, o)
			scenes := chatsOnOwnLanes(len(ids), DefaultConcurrency)
			parts := make([]events.Outbound, len(ids))
			for i, id := range ids {
				out := outbound(id)
				out.Turn = id[:len(id)-2]
				out.Scene.ID = scenes[i]
				if tc.big {
					out.Content = events.Segments{events.TextSeg(strings.Repeat("x", maxBatchBytes/2))}
				}
				parts[i] = out
				publish(t, srv.JS, out, "")
			}
			testwait.Eventually(t, 0, func() error {
				_, n := first.e.receipts.stats()
				return testwait.Want(n == uint64(recorded) && cb.count() == len(ids), "%d of %d receipts written, %d posts", n, recorded, cb.count())
			})
			writes, _ := first.e.receipts.stats()
			_ = first.Stop(context.Background())

			// The first write (one receipt, or two that came at once), then one batch of
			// bucket 0 and plain receipts for the lone part of bucket 1 and the part without a
			// bucket: fewer messages than parts.
			switch n := streamMsgs(t, srv.JS, events.StreamIMSent, events.IMSentBatchSubject(0)); {
			case tc.big && (n != 0 || writes != uint64(recorded)):
				t.Errorf("%d batches, %d writes of %d large parts, want each alone", n, writes, recorded)
			case tc.big:
			case writes >= uint64(recorded) || writes < 3:
				t.Errorf("%d receipt messages for %d parts, want a group commit", writes, recorded)
			case n < 1 || n > 2:
				t.Errorf("%d messages on bucket 0's subject, want a batch (two if the first write was one)", n)
			}
			if n := streamMsgs(t, srv.JS, events.StreamIMSent, events.IMSentBatchSubject(1)); n != 0 {
				t.Errorf("%d messages on bucket 1's subject, want none (its one part is recorded alone)", n)
			}
			sent, err := srv.JS.Stream(context.Background(), events.StreamIMSent)
			if err != nil {
				t.Fatal(err)
			}
			for _, out := range parts {
				f, err := store.FindReceipt(context.Background(), srv.JS, sent, out.SessionKey(), out.OutID, time.Time{})
				switch {
				case out.OutID == tc.killed:
					if !errors.Is(err, jetstream.ErrMsgNotFound) {
						t.Errorf("the killed part has a receipt: %+v, %v", f.Receipt, err)
					}
				case err != nil || !f.OK || f.Receipt.OutID != out.OutID || f.Receipt.MessageID == "":
					t.Errorf("receipt of %s: %+v, %v", out.OutID, f.Receipt, err)
				}
			}

			// A recreated consumer delivers every part again: each recorded one is skipped,
			// the killed one sent a second time.
			if err := srv.JS.DeleteConsumer(context.Background(), events.StreamIMOut, DefaultDurable); err != nil {
				t.Fatalf("delete consumer: %v", err)
			}
			second := start(t, fastOptions(srv, testConfig(cb), t))
			testwait.Eventually(t, 0, func() error {
				s := second.Stats()
				return testwait.Want(s.Skipped+s.Delivered == uint64(len(ids)), "second egress: %+v", s)
			})
			if s := second.Stats(); s.Skipped != uint64(recorded) {
				t.Errorf("second egress %+v, want %d skipped", s, recorded)
			}
			posts := map[string]int{}
			for i := range cb.count() {
				posts[cb.get(i).header.Get("Idempotency-Key")]++
			}
			for _, id := range ids {
				want := 1
				if id == tc.killed {
					want = 2
				}
				if posts[id] != want {
					t.Errorf("%s posted %d times, want %d (all posts: %v)", id, posts[id], want, posts)
				}
			}
		})
	}
}
