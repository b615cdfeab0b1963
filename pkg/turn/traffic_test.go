package turn

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// replicaCounts lists the replica counts TestIdleReplicaTraffic measures. The default keeps CI
// short; `-turn.replicas=1,10,50` gives issue 41's figures.
var replicaCounts = flag.String("turn.replicas", "1,4", "comma-separated idle turn-worker replica counts TestIdleReplicaTraffic measures")

// replicaWindow is how long each count is measured.
var replicaWindow = flag.Duration("turn.replicas.window", 5*time.Second, "measurement interval of TestIdleReplicaTraffic")

// varz is the part of the server's /varz this test reads.
type varz struct {
	InMsgs  int64 `json:"in_msgs"`
	OutMsgs int64 `json:"out_msgs"`
}

// TestIdleReplicaTraffic starts N idle turn-worker replicas (no sessions), each on its own
// connection to a real nats-server, and reads the server's /varz (its monitoring handler, over
// HTTP) before and after an interval: the messages per second the replicas cost the server
// while doing nothing. It prints the figures; it asserts only that replicas cost something and
// that the server kept counting (the rates depend on the machine).
func TestIdleReplicaTraffic(t *testing.T) {
	var counts []int
	for _, s := range strings.Split(*replicaCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			t.Fatalf("-turn.replicas: bad count %q", s)
		}
		counts = append(counts, n)
	}
	for _, n := range counts {
		t.Run(fmt.Sprintf("replicas=%d", n), func(t *testing.T) {
			h := newHarness(t, nil)
			mon := httptest.NewServer(http.HandlerFunc(h.ns.Embedded.Server().HandleVarz))
			t.Cleanup(mon.Close)
			read := func() varz {
				t.Helper()
				resp, err := http.Get(mon.URL + "/varz")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var v varz
				if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
					t.Fatal(err)
				}
				return v
			}
			for i := range n {
				nc, js := h.ns.Connect(t)
				o := h.options(fmt.Sprintf("idle-%02d", i))
				o.LeaseTTL, o.AckWait = 2*time.Second, 2*time.Second
				w, err := New(context.Background(), nc, js, o)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = w.Stop(context.Background()) })
			}
			// Let every replica see every other (the lease watch) before counting.
			time.Sleep(3 * time.Second)
			a, start := read(), time.Now()
			time.Sleep(*replicaWindow) // the window the traffic is measured over
			b, secs := read(), time.Since(start).Seconds()
			in, out := float64(b.InMsgs-a.InMsgs)/secs, float64(b.OutMsgs-a.OutMsgs)/secs
			t.Logf("idle turn-worker replicas=%d: server in_msgs %.0f/s (%.1f per replica), out_msgs %.0f/s (%.1f per replica), over %.1fs",
				n, in, in/float64(n), out, out/float64(n), secs)
			if b.InMsgs <= a.InMsgs {
				t.Fatalf("server counted no messages from %d replicas (in_msgs %d -> %d)", n, a.InMsgs, b.InMsgs)
			}
		})
	}
}
