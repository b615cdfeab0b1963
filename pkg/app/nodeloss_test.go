package app_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/webhook"
)

var (
	nodeLoss         = flag.Bool("nodeloss", false, "run TestFaultNodeLoss (issue 37: one NATS node killed under load, every role its own process)")
	nodeLossDuration = flag.Duration("nodeloss.duration", 45*time.Second, "TestFaultNodeLoss: how long the load goes on")
	nodeLossSessions = flag.Int("nodeloss.sessions", 50, "TestFaultNodeLoss: concurrent chat sessions")
	nodeLossDown     = flag.Duration("nodeloss.down", 10*time.Second, "TestFaultNodeLoss: how long the killed NATS node stays down")
)

// TestFaultNodeLoss is the node-loss scenario of issue 37: three nats-server processes
// clustered on loopback, every role as two OS processes, -nodeloss.sessions chats sending
// through the signed webhook (each its next message once the previous one was answered), and
// one NATS node (the one leading the most streams) killed with SIGKILL at a third of the load
// and started again -nodeloss.down later, with its store, as a platform restarts a container.
// No role is killed. It reports, for the turns in flight at the kill, kill → reply p50/p99/max;
// replies later than 10 s; lost, duplicate and executed-twice counts; model steps asked again;
// the 503s ingest answered. It fails on a lost or duplicate reply, a tool run twice, a turn
// stopped by ai.agent.timeout, or a 503 without Retry-After.
//
// Opt in (about two minutes; -count=N for N runs):
//
//	go test ./pkg/app -run TestFaultNodeLoss -v -nodeloss -count=3
func TestFaultNodeLoss(t *testing.T) {
	if !*nodeLoss {
		t.Skip("opt in with -nodeloss")
	}
	fc := startFaultCluster(t)
	dir, logDir, plan, urls, nodes, ports, model, cb, rec, common := fc.dir, fc.logDir, fc.plan, fc.urls, fc.nodes, fc.ports, fc.model, fc.cb, fc.rec, fc.common
	var roles []*childproc.Proc
	var webhooks []string
	for _, role := range []string{"egress", "tool", "turn", "ingest"} {
		for i := range 2 {
			name := fmt.Sprintf("%s-%d", role, i)
			listen := "127.0.0.1:0"
			if role == "ingest" {
				listen = fmt.Sprintf("127.0.0.1:%d", ports[i])
				webhooks = append(webhooks, "http://"+listen)
			}
			roles = append(roles, startChild(t, name, filepath.Join(logDir, name+".log"), append(slices.Clone(common),
				"AB_ROLE="+role, "AB_LISTEN="+listen, "AB_DATA="+filepath.Join(dir, name),
				"AGENTBUS_NATS_USER="+natsutil.RoleAdmin, "AGENTBUS_NATS_PASSWORD="+os.Getenv(natsutil.PasswordEnv(natsutil.RoleAdmin)),
				"AGENTBUS_NATS_PROVISION=update")))
		}
	}
	t.Cleanup(func() {
		for i := len(roles) - 1; i >= 0; i-- {
			roles[i].Stop(10 * time.Second)
		}
	})
	for _, c := range roles {
		for attempt := 1; ; attempt++ {
			_, err := c.WaitReady(180 * time.Second)
			if err == nil {
				break
			}
			if attempt == 3 {
				t.Fatal(err)
			}
			if err := c.Respawn(); err != nil {
				t.Fatal(err)
			}
		}
	}

	type sent struct {
		id string
		at time.Time
	}
	var (
		mu           sync.Mutex
		allSent      []sent
		code503      int
		busy503      int // "too many requests at once" (im.webhook.maxInFlight), not the bus
		no503Retry   int
		postSent503  = map[string]bool{}
		otherCodes   = map[int]int{}
		postAttempts int
	)
	post := func(ctx context.Context, id string, m msg) error {
		b := m.body()
		sig := webhook.Sign(botSecret, b)
		for attempt := 0; ; attempt++ {
			url := webhooks[attempt%len(webhooks)] + "/webhook/" + botID
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(b)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(webhook.SignatureHeader, sig)
			resp, err := http.DefaultClient.Do(req)
			mu.Lock()
			postAttempts++
			mu.Unlock()
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					return nil
				}
				mu.Lock()
				if resp.StatusCode == http.StatusServiceUnavailable {
					code503++
					if strings.Contains(string(body), "too many requests at once") {
						busy503++
					}
					postSent503[id] = true
					if resp.Header.Get("Retry-After") == "" {
						no503Retry++
					}
				} else {
					otherCodes[resp.StatusCode]++
				}
				mu.Unlock()
			}
			if ctx.Err() != nil {
				return fmt.Errorf("post %s: %w (last: %v)", id, ctx.Err(), err)
			}
			time.Sleep(200 * time.Millisecond) // a platform retries, on the other replica
		}
	}
	hasReply := func(id string) func(reply) bool { return func(r reply) bool { return r.ReplyTo == id } }

	start := time.Now()
	loadEnd := start.Add(*nodeLossDuration)
	var wg sync.WaitGroup
	for s := range *nodeLossSessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("nl%d", s)
			for n := 0; time.Now().Before(loadEnd); n++ {
				id := fmt.Sprintf("n%d-%d", s, n)
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				mu.Lock()
				allSent = append(allSent, sent{id: id, at: time.Now()})
				mu.Unlock()
				err := post(ctx, id, private(id, user, faultTool+" m "+id))
				cancel()
				if err != nil {
					t.Errorf("session %d: %v", s, err)
					return
				}
				// Longer than ai.agent.timeout (2m): a turn stopped by it still answers.
				if _, err := cb.waitFor(1, 180*time.Second, hasReply(id)); err != nil {
					return // counted as lost below
				}
			}
		}()
	}

	// The node leading the most streams is killed at a third of the load.
	time.Sleep(time.Until(start.Add(*nodeLossDuration / 3))) // the schedule of the fault
	victim := nodeLossVictim(t, urls, plan)
	leadersBefore := nodeLossLeaders(urls)
	nodes[victim].Kill()
	killAt := time.Now()
	t.Logf("%.1fs kill -9 %s (leaders before: %v)", killAt.Sub(start).Seconds(), plan[victim].Name, leadersBefore)
	time.Sleep(*nodeLossDown) // the node stays down this long: the point of the test
	if err := nodes[victim].Respawn(); err != nil {
		t.Fatal(err)
	}
	restartAt := time.Now()
	if _, err := nodes[victim].WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1fs %s started again (ready after %s)", restartAt.Sub(start).Seconds(), plan[victim].Name, time.Since(restartAt).Round(time.Millisecond))
	wg.Wait()
	time.Sleep(3 * time.Second) // late duplicates
	t.Logf("leaders after: %v", nodeLossLeaders(urls))

	mu.Lock()
	defer mu.Unlock()
	got := cb.all()
	byID := map[string][]reply{}
	for _, r := range got {
		byID[r.ReplyTo] = append(byID[r.ReplyTo], r)
	}
	var lost, dups, stopped, toolFailed []string
	var inFlight, sentDown []time.Duration // kill → reply; sent during the outage: sent → reply
	var lat []time.Duration
	late, resent := 0, 0 // resent: parts egress sent again under the same id (the receiver drops them)
	type slow struct {
		id   string
		d    time.Duration
		text string
	}
	var slowest []slow
	for _, s := range allSent {
		rs := byID[s.id]
		ids := map[string]bool{}
		for _, r := range rs {
			ids[r.ID] = true
		}
		resent += len(rs) - len(ids)
		switch {
		case len(rs) == 0:
			lost = append(lost, s.id)
			continue
		case len(ids) > 1:
			dups = append(dups, fmt.Sprintf("%s×%d", s.id, len(ids)))
		}
		first := rs[0]
		if !strings.Contains(first.Text(), "[recorded") {
			toolFailed = append(toolFailed, fmt.Sprintf("%s: %q", s.id, first.Text()))
		}
		if strings.Contains(first.Text(), "(stopped") {
			stopped = append(stopped, fmt.Sprintf("%s: %q", s.id, first.Text()))
		}
		d := first.At.Sub(s.at)
		lat = append(lat, d)
		if d > 10*time.Second {
			late++
		}
		switch {
		case s.at.Before(killAt) && first.At.After(killAt):
			k := first.At.Sub(killAt)
			inFlight = append(inFlight, k)
			slowest = append(slowest, slow{s.id, k, first.Text()})
		case !s.at.Before(killAt) && s.at.Before(restartAt):
			sentDown = append(sentDown, d)
		}
	}
	rec.mu.Lock()
	var twice []string
	for id, n := range rec.n {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s×%d", id, n))
		}
	}
	rec.mu.Unlock()
	steps := map[string]int{}
	reqs := model.Requests()
	for _, r := range reqs {
		last := r.Messages[len(r.Messages)-1]
		steps[fmt.Sprintf("%s|%v", r.LastUser(), last.Role == "tool")]++
	}
	reasked := 0
	for _, n := range steps {
		reasked += n - 1
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return d[min(len(d)-1, int(float64(len(d))*p))].Round(time.Millisecond)
	}
	slices.Sort(inFlight)
	slices.Sort(sentDown)
	slices.Sort(lat)
	slices.SortFunc(slowest, func(a, b slow) int { return int(b.d - a.d) })
	for _, s := range slowest[:min(5, len(slowest))] {
		var asked []string
		for _, r := range reqs {
			if strings.HasSuffix(r.LastUser(), " "+s.id) {
				asked = append(asked, fmt.Sprintf("%.1fs", r.Start.Sub(killAt).Seconds()))
			}
		}
		t.Logf("slowest in flight: %s answered %s after the kill (model asked at kill%v): %q", s.id, s.d.Round(time.Millisecond), asked, s.text)
	}
	t.Logf("node loss: %d sessions, %s of load, %s killed %s, messages %d, replies %d",
		*nodeLossSessions, *nodeLossDuration, plan[victim].Name, *nodeLossDown, len(allSent), len(got))
	t.Logf("turns in flight at the kill: %d; kill → reply p50 %s p99 %s max %s", len(inFlight), pct(inFlight, 0.5), pct(inFlight, 0.99), pct(inFlight, 1))
	t.Logf("sent while the node was down: %d; sent → reply p50 %s p99 %s max %s", len(sentDown), pct(sentDown, 0.5), pct(sentDown, 0.99), pct(sentDown, 1))
	t.Logf("all replies: p50 %s p99 %s max %s; later than 10s: %d", pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1), late)
	t.Logf("lost %d, duplicates %d, tools executed twice %d, stopped by a timeout %d, model requests %d, steps asked again %d; parts sent again under the same id %d",
		len(lost), len(dups), len(twice), len(stopped), len(reqs), reasked, resent)
	t.Logf("replies whose tool call failed: %d %v", len(toolFailed), toolFailed[:min(3, len(toolFailed))])
	t.Logf("ingest: %d POSTs, 503 %d (to %d messages; %d of them too many requests at once, %d the bus; %d without Retry-After), other non-202 %v",
		postAttempts, code503, len(postSent503), busy503, code503-busy503, no503Retry, otherCodes)
	if len(lost) > 0 {
		t.Errorf("lost (no reply): %v", lost)
	}
	if len(dups) > 0 {
		t.Errorf("duplicate replies: %v", dups)
	}
	if len(twice) > 0 {
		t.Errorf("tool calls executed more than once: %v", twice)
	}
	if len(stopped) > 0 {
		t.Errorf("turns stopped: %v", stopped)
	}
	if no503Retry > 0 {
		t.Errorf("%d 503 answers without Retry-After", no503Retry)
	}
}

// nodeLossLeaders maps each stream to its leader's name.
func nodeLossLeaders(urls string) map[string]string {
	out := map[string]string{}
	nc, err := nats.Connect(urls, adminAuth())
	if err != nil {
		return out
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		if info.Cluster != nil {
			out[info.Config.Name] = info.Cluster.Leader
		}
	}
	return out
}

// nodeLossVictim is the index of the node leading the most streams.
func nodeLossVictim(t *testing.T, urls string, plan []childproc.Node) int {
	count := map[string]int{}
	for _, leader := range nodeLossLeaders(urls) {
		count[leader]++
	}
	best := 1
	for i, n := range plan {
		if count[n.Name] > count[plan[best].Name] {
			best = i
		}
	}
	return best
}
