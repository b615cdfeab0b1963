package dendritetest_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/pkg/im/matrix/dendritetest"
)

// TestHangUps: clients that hang up on /sync at any moment (what an adapter does when it
// stops, and what a flaky network does) must not wedge the homeserver. Dendrite v0.13.8 as
// released pins an SQLite driver that, on such a hang-up, could leave a connection holding
// its read transaction: every later write then waited out the 10 s busy timeout and the sync
// API's consumer panicked, killing the server in the middle of a test (this test failed 3 of 3
// runs on it). .ci/run builds it with a fixed driver (.ci/dendrite/go.mod), Start refuses a
// binary with the old one, and this test shows the fix holds.
func TestHangUps(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Dendrite")
	}
	hs := dendritetest.Start(t, dendritetest.Options{})
	alice := hs.Register(t, "alice", "Alice")
	bob := hs.Register(t, "bob", "Bob")
	ctx := context.Background()
	room, err := alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "public_chat", Invite: []id.UserID{bob.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Client.JoinRoomByID(ctx, room.RoomID); err != nil {
		t.Fatal(err)
	}

	const rounds = 300
	sent := make(chan error, 1)
	go func() {
		for i := range rounds / 10 {
			if _, err := alice.Client.SendText(ctx, room.RoomID, "while bob hangs up "+strconv.Itoa(i)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	hungUp := 0
	for range rounds {
		// A full sync (no since token) does the most database work, so a hang-up lands inside
		// a query more often than not.
		c, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(8000))*time.Microsecond)
		req, _ := http.NewRequestWithContext(c, http.MethodGet, hs.URL+"/_matrix/client/v3/sync?timeout=0", nil)
		req.Header.Set("Authorization", "Bearer "+bob.Token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		} else {
			hungUp++
		}
		cancel()
	}
	if err := <-sent; err != nil {
		t.Fatalf("sending while another client hung up: %v", err)
	}
	t.Logf("%d of %d syncs hung up mid-request", hungUp, rounds)

	// Writes still go through and reach a syncing client promptly (well inside the 10 s busy
	// timeout that a stuck read transaction would make every write wait out).
	for i := range 5 {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		evt, err := alice.Client.SendText(c, room.RoomID, "after the hang-ups")
		cancel()
		if err != nil {
			t.Fatalf("send %d after the hang-ups: %v", i, err)
		}
		if !seen(t, bob.Client, room.RoomID, evt.EventID, 30*time.Second) {
			t.Fatalf("message %d after the hang-ups never reached bob", i)
		}
	}
}

// seen reports whether c's sync shows event id in room within d.
func seen(t *testing.T, c *mautrix.Client, room id.RoomID, event id.EventID, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	since := ""
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.SyncRequest(ctx, 2000, since, "", false, "")
		cancel()
		if err != nil {
			t.Logf("sync: %v", err)
			time.Sleep(200 * time.Millisecond) // a failed sync: pause before the next
			continue
		}
		since = resp.NextBatch
		if r, ok := resp.Rooms.Join[room]; ok {
			for _, e := range r.Timeline.Events {
				if e.ID == event {
					return true
				}
			}
		}
	}
	return false
}
