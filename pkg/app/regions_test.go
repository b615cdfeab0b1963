package app_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/webhook"
)

var (
	regions         = flag.Bool("regions", false, "run TestRegionFailover (issue 41: three regions, one killed under load, a standby promoted)")
	regionsDuration = flag.Duration("regions.duration", 30*time.Second, "TestRegionFailover: how long the load goes on")
	regionsSessions = flag.Int("regions.sessions", 20, "TestRegionFailover: concurrent chat sessions")
	regionsDecide   = flag.Duration("regions.decide", time.Second, "TestRegionFailover: kill → `region promote` (the operator's or a watchdog's decision)")
	regionsCut      = flag.Duration("regions.cut", 0, "TestRegionFailover: stop the hub (SIGSTOP) this long before the kill, so that a's last messages are never mirrored: the loss bound under a long mirror window")
	regionsNodes    = flag.Int("regions.nodes", 1, "TestRegionFailover: JetStream servers per region (3: a three-node cluster per region, 9 servers and the hub, streams at 3 replicas)")
	regionsSchedule = flag.Duration("regions.schedule", 8*time.Second, "TestRegionFailover: a reminder is scheduled in region a to fire this long after the kill (0: none); it must fire once, from b")
	regionsCheckpt  = flag.Duration("regions.checkpoint", time.Second, "TestRegionFailover: nats.region.checkpointMs of region a (1h: only the checkpoints at start, so b's consumers deliver everything and the receipts alone keep egress from sending twice)")
)

// Environment of a TestRegionFailover child: the region server's domain, ports and store, and
// a role's nats.region settings.
const (
	envRegionDomain   = "AB_REGION_DOMAIN"        // regionnats: JetStream domain; "" is the leaf-node hub
	envRegionPort     = "AB_REGION_PORT"          // regionnats: client port
	envRegionLeaf     = "AB_REGION_LEAF"          // regionnats: the hub's leaf-node port ("" for none: isolated)
	envRegionStore    = "AB_REGION_STORE"         // regionnats: JetStream directory
	envRegionNode     = "AB_REGION_NODE"          // regionnats: the node's index in its region's cluster ("" for a single server)
	envRegionCluster  = "AB_REGION_CLUSTER_PORT"  // regionnats: the node's cluster (route) port
	envRegionRoutes   = "AB_REGION_ROUTES"        // regionnats: the cluster ports of every node of the region, comma-separated
	envRegionHTTP     = "AB_REGION_HTTP_PORT"     // regionnats: monitoring port ("" for none; TestFootprint's server)
	envRegionName     = "AB_REGION_NAME"          // role: nats.region.name
	envRegionStandby  = "AB_REGION_STANDBY"       // role: nats.region.source when a standby
	envRegionReplicas = "AB_REGION_REPLICAS"      // role: nats.replicas
	envRegionCheckpt  = "AB_REGION_CHECKPOINT_MS" // role: nats.region.checkpointMs
)

// regionChildConfig applies a TestRegionFailover role's region settings to cfg and reports
// whether the role is a standby (it becomes ready only once its region is promoted).
func regionChildConfig(cfg *config.Config) bool {
	if n := os.Getenv(envRegionReplicas); n != "" {
		cfg.NATS.Replicas, _ = strconv.Atoi(n)
	}
	name := os.Getenv(envRegionName)
	if name == "" {
		return false
	}
	cfg.NATS.Region = config.Region{Name: name}
	cfg.NATS.Region.CheckpointMs, _ = strconv.ParseInt(os.Getenv(envRegionCheckpt), 10, 64)
	if src := os.Getenv(envRegionStandby); src != "" {
		cfg.NATS.Region.Standby, cfg.NATS.Region.Source = true, src
	}
	return cfg.NATS.Region.Standby
}

// regionNATSChild runs one nats-server of TestRegionFailover: the hub every region is a leaf
// node of (no JetStream), or a region's server (JetStream in its own domain, a leaf node of
// the hub, or isolated when envRegionLeaf is empty).
func regionNATSChild(log *slog.Logger, sig <-chan os.Signal) int {
	domain := os.Getenv(envRegionDomain)
	port, _ := strconv.Atoi(os.Getenv(envRegionPort))
	leaf, _ := strconv.Atoi(os.Getenv(envRegionLeaf))
	o := &server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, ServerName: "hub"}
	if hp := os.Getenv(envRegionHTTP); hp != "" {
		o.HTTPHost = "127.0.0.1"
		o.HTTPPort, _ = strconv.Atoi(hp)
	}
	if domain == "" {
		o.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: leaf}
	} else {
		o.ServerName = "region-" + domain
		o.JetStream, o.JetStreamDomain, o.StoreDir = true, domain, os.Getenv(envRegionStore)
		if node := os.Getenv(envRegionNode); node != "" {
			// One node of the region's cluster: the region is one JetStream domain with its
			// own meta layer, the cluster named after it.
			o.ServerName += "-" + node
			cport, _ := strconv.Atoi(os.Getenv(envRegionCluster))
			o.Cluster = server.ClusterOpts{Name: "region-" + domain, Host: "127.0.0.1", Port: cport}
			for _, rp := range strings.Split(os.Getenv(envRegionRoutes), ",") {
				u, _ := neturl.Parse("nats://127.0.0.1:" + rp)
				o.Routes = append(o.Routes, u)
			}
		}
		if leaf != 0 {
			u, _ := neturl.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leaf))
			o.LeafNode = server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*neturl.URL{u}}}}
		}
	}
	s, err := server.NewServer(o)
	if err != nil {
		log.Error("region server", "err", err)
		return 2
	}
	s.ConfigureLogger()
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		log.Error("region server not ready")
		return 2
	}
	childproc.Ready("")
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
	return 0
}

// TestRegionFailover is the region scenario of issue 41. Three regions, each with JetStream in
// a domain of its own (a, b, c): one nats-server process each, or with -regions.nodes=3 a
// three-node cluster each (9 JetStream servers, streams at 3 replicas); every server a leaf
// node of a hub server without JetStream. Region a is live: ingest, turn-worker, tool-worker and egress, one process each,
// every stream its own. Region b is its standby: the same four roles with nats.region.standby,
// which create mirrors of a's streams across domains and wait. Region c holds mirrors too (no
// roles). -regions.sessions chats send through a's signed webhook (each its next message once
// the previous one was answered; a platform retries on b's webhook when a's is down). At a
// third of the load region a is killed entirely (SIGKILL: its server and its four roles);
// -regions.decide later b is promoted (natsutil.Promote, what `agentbus region promote` runs)
// and its roles start; c's mirrors of a are then made anew from b (c becomes b's standby).
//
// It reports the mirror delay measured while a was live (per stream: origin timestamp → in
// b's mirror), the messages a held that b's mirrors had not (a's server restarted alone at the
// end, with its store), kill → promoted → roles ready → every session answered again, lost
// messages, duplicates, replies b sent again, tools run twice. A reminder scheduled in a's
// SESSION_IN (-regions.schedule after the kill) must fire once, from b. It fails on a duplicate reply
// (two different replies to one message), on a message lost although b's mirror had it, and
// on a session that never resumes, and when c has not caught up with b a minute after the load.
//
// Opt in (about a minute and a half):
//
//	go test ./pkg/app -run TestRegionFailover -v -regions
func TestRegionFailover(t *testing.T) {
	if !*regions {
		t.Skip("opt in with -regions")
	}
	dir := t.TempDir()
	logDir := dir
	if *faultLogs != "" {
		logDir = *faultLogs
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nodes := max(*regionsNodes, 1)
	domains := []string{"a", "b", "c"}
	// hub client, hub leaf, a's and b's webhooks; per node of each region a client port and
	// (with nodes > 1) a cluster port.
	ports, err := childproc.FreePorts(4 + 2*nodes*len(domains))
	if err != nil {
		t.Fatal(err)
	}
	hubPort, leafPort := ports[0], ports[1]
	webhooks := []string{fmt.Sprintf("http://127.0.0.1:%d", ports[2]), fmt.Sprintf("http://127.0.0.1:%d", ports[3])}
	natsPorts, clusterPorts := map[string][]int{}, map[string][]int{}
	for i, d := range domains {
		for n := range nodes {
			natsPorts[d] = append(natsPorts[d], ports[4+2*(i*nodes+n)])
			clusterPorts[d] = append(clusterPorts[d], ports[5+2*(i*nodes+n)])
		}
	}
	natsURL := func(d string) string {
		var us []string
		for _, p := range natsPorts[d] {
			us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
		return strings.Join(us, ",")
	}

	var procs []*childproc.Proc
	t.Cleanup(func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].Stop(10 * time.Second)
		}
	})
	// startNATS starts the hub (domain "") or every server of a region, as a leaf node of the
	// hub unless leaf is 0, and waits until they all accept clients. suffix names a restart.
	startNATS := func(domain string, leaf int, suffix string) []*childproc.Proc {
		var out []*childproc.Proc
		count := nodes
		if domain == "" {
			count = 1
		}
		for n := range count {
			name, port := "nats-hub", hubPort
			env := []string{faultChildEnv + "=regionnats", envRegionDomain + "=" + domain}
			if domain != "" {
				name, port = "nats-"+domain, natsPorts[domain][n]
				if nodes > 1 {
					name += strconv.Itoa(n + 1)
					var routes []string
					for _, cp := range clusterPorts[domain] {
						routes = append(routes, strconv.Itoa(cp))
					}
					env = append(env, envRegionNode+"="+strconv.Itoa(n+1), envRegionCluster+"="+strconv.Itoa(clusterPorts[domain][n]),
						envRegionRoutes+"="+strings.Join(routes, ","))
				}
			}
			env = append(env, envRegionPort+"="+strconv.Itoa(port), envRegionStore+"="+filepath.Join(dir, name))
			if leaf != 0 {
				env = append(env, envRegionLeaf+"="+strconv.Itoa(leaf))
			}
			p := startChild(t, name+suffix, filepath.Join(logDir, name+suffix+".log"), env)
			procs = append(procs, p)
			out = append(out, p)
		}
		for _, p := range out {
			if _, err := p.WaitReady(120 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	hub := startNATS("", leafPort, "")[0]
	servers := map[string][]*childproc.Proc{}
	serversUp := time.Now()
	for _, d := range domains {
		servers[d] = startNATS(d, leafPort, "")
	}
	t.Logf("%d JetStream servers (%d per region) and the hub up in %s", nodes*len(domains), nodes, time.Since(serversUp).Round(time.Millisecond))
	connect := func(d string) (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(natsURL(d), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	_, jsA := connect("a")
	_, jsB := connect("b")
	_, jsC := connect("c")

	model := fakeopenai.New(t, faultScript)
	cb := newCallback(t)
	rec := newExecRecorder(t)
	common := []string{faultChildEnv + "=role", "AGENTBUS_WEBHOOK_SECRET=" + botSecret,
		"AGENTBUS_WEBHOOK_CALLBACK=" + cb.srv.URL + "/callback", "OPENAI_API_KEY=test-key",
		"AB_MODEL=" + model.BaseURL(), "AB_RECORD=" + rec.srv.URL, "GOTRACEBACK=all",
		"AGENTBUS_NATS_USER=admin", "AGENTBUS_NATS_PASSWORD=unused", // the region servers have no users
		"AGENTBUS_NATS_PROVISION=update", envRegionReplicas + "=" + strconv.Itoa(nodes), envRegionCheckpt + "=" + strconv.FormatInt(regionsCheckpt.Milliseconds(), 10)}
	if *faultLogs != "" {
		common = append(common, "AB_LOG_INFO=1")
	}
	startRoles := func(region string, listen string, standby bool) []*childproc.Proc {
		var out []*childproc.Proc
		for _, role := range []string{"egress", "tool", "turn", "ingest"} {
			name := region + "-" + role
			l := "127.0.0.1:0"
			if role == "ingest" {
				l = listen
			}
			env := append(slices.Clone(common), "AGENTBUS_NATS_URL="+natsURL(region), "AB_ROLE="+role, "AB_LISTEN="+l,
				"AB_DATA="+filepath.Join(dir, name), envRegionName+"="+region)
			if standby {
				env = append(env, envRegionStandby+"=a")
			}
			p := startChild(t, name, filepath.Join(logDir, name+".log"), env)
			procs = append(procs, p)
			out = append(out, p)
		}
		return out
	}
	rolesA := startRoles("a", strings.TrimPrefix(webhooks[0], "http://"), false)
	for _, p := range rolesA {
		if _, err := p.WaitReady(180 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	rolesB := startRoles("b", strings.TrimPrefix(webhooks[1], "http://"), true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	spec := events.Spec{Replicas: nodes}.WithDefaults()
	if err := natsutil.ProvisionStandby(ctx, jsC, spec, "a"); err != nil {
		t.Fatal(err)
	}
	// Region b's standbys create the mirrors; they are all there before the load starts.
	for _, name := range natsutil.RegionStreams(spec) {
		for {
			st, err := jsB.Stream(ctx, name)
			if err == nil && st.CachedInfo().Config.Mirror != nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("standby b: no mirror %s", name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The mirror delay: each message's origin timestamp → when b's mirror holds it, read by an
	// ordered consumer on the mirror, while a is live.
	delayStreams := []string{events.StreamIMIn, events.StreamSessionIn, events.StreamAgentCtx, events.StreamIMOut, events.StreamIMSent}
	var dmu sync.Mutex
	delays := map[string][]time.Duration{}
	mctx, mstop := context.WithCancel(ctx)
	var mwg sync.WaitGroup
	for _, name := range delayStreams {
		cons, err := jsB.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			md, err := m.Metadata()
			if err != nil {
				return
			}
			d := time.Since(md.Timestamp)
			dmu.Lock()
			delays[name] = append(delays[name], d)
			dmu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		mwg.Add(1)
		go func() { defer mwg.Done(); <-mctx.Done(); cc.Stop() }()
	}

	type sent struct {
		id, session string
		at          time.Time
		acceptedBy  int // index of the webhook that answered 202
	}
	var (
		mu      sync.Mutex
		allSent []*sent
		posts   int
	)
	post := func(ctx context.Context, s *sent, m msg) error {
		b := m.body()
		sig := webhook.Sign(botSecret, b)
		for attempt := 0; ; attempt++ {
			i := attempt % len(webhooks)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, webhooks[i]+"/webhook/"+botID, strings.NewReader(string(b)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(webhook.SignatureHeader, sig)
			resp, err := http.DefaultClient.Do(req)
			mu.Lock()
			posts++
			mu.Unlock()
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					mu.Lock()
					s.acceptedBy = i
					mu.Unlock()
					return nil
				}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("post %s: %w (last: %v)", s.id, ctx.Err(), err)
			}
			time.Sleep(200 * time.Millisecond) // a platform retries, on the other region
		}
	}
	hasReply := func(id string) func(reply) bool { return func(r reply) bool { return r.ReplyTo == id } }

	// A reminder scheduled in region a (a message schedule in a's SESSION_IN, as
	// schedule_followup's turn writes it) to fire after a is lost: b's mirror holds it, and
	// once promoted b's SESSION_IN allows schedules again. Its session is made in a first.
	sched := private("rs-0", "rgsched", "hello")
	if *regionsSchedule > 0 {
		if err := post(ctx, &sent{id: sched.id}, sched); err != nil {
			t.Fatal(err)
		}
		if _, err := cb.waitFor(1, 60*time.Second, hasReply(sched.id)); err != nil {
			t.Fatalf("the reminder's session: %v", err)
		}
	}
	start := time.Now()
	loadEnd := start.Add(*regionsDuration)
	schedAt := start.Add(*regionsDuration/3 + *regionsSchedule).Truncate(time.Second).Add(time.Second)
	if *regionsSchedule > 0 {
		s, err := schedule.Open(ctx, jsA)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, sched.key(), events.ScheduleID(events.ScheduleFollowUp, ""), schedule.At(schedAt), "",
			events.Scheduled{Text: "REMINDER rs-1", CreatedBy: events.Sender{ID: "rgsched", Name: "Rgsched"}, Kind: events.ScheduleFollowUp}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for sn := range *regionsSessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("rg%d", sn)
			for n := 0; time.Now().Before(loadEnd); n++ {
				s := &sent{id: fmt.Sprintf("r%d-%d", sn, n), session: user, at: time.Now(), acceptedBy: -1}
				mu.Lock()
				allSent = append(allSent, s)
				mu.Unlock()
				pctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
				err := post(pctx, s, private(s.id, user, faultTool+" m "+s.id))
				cancel()
				if err != nil {
					t.Errorf("session %d: %v", sn, err)
					return
				}
				if _, err := cb.waitFor(1, 60*time.Second, hasReply(s.id)); err != nil {
					continue // counted as lost below; the chat goes on
				}
			}
		}()
	}

	// Region a dies entirely at a third of the load; with -regions.cut the link between the
	// regions stops first, and a goes on accepting what b never sees.
	time.Sleep(time.Until(start.Add(*regionsDuration/3 - *regionsCut))) // the schedule of the fault
	if *regionsCut > 0 {
		if err := syscall.Kill(hub.Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Logf("%.1fs hub stopped (SIGSTOP): nothing reaches b's mirrors", time.Since(start).Seconds())
		time.Sleep(*regionsCut) // the link stays cut this long: the point of the test
	}
	lagAtKill := map[string][2]uint64{} // stream → a's last seq, b's last seq, read just before the kill
	for _, name := range natsutil.RegionStreams(spec) {
		a, errA := jsA.Stream(ctx, name)
		b, errB := jsB.Stream(ctx, name)
		if errA == nil && errB == nil {
			lagAtKill[name] = [2]uint64{a.CachedInfo().State.LastSeq, b.CachedInfo().State.LastSeq}
		}
	}
	repliedBeforeKill := map[string]bool{}
	for _, p := range append(slices.Clone(rolesA), servers["a"]...) {
		p.Kill()
	}
	killAt := time.Now()
	if *regionsCut > 0 {
		if err := syscall.Kill(hub.Pid(), syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range cb.all() {
		repliedBeforeKill[r.ID] = true
	}
	mstop()
	mwg.Wait()
	t.Logf("%.1fs region a killed (server and %d roles, SIGKILL)", killAt.Sub(start).Seconds(), len(rolesA))

	time.Sleep(*regionsDecide) // the operator's time to decide, as the runbook has it
	promoteStart := time.Now()
	rep, err := natsutil.Promote(ctx, jsB, spec)
	if err != nil {
		t.Fatal(err)
	}
	promotedAt := time.Now()
	for _, c := range rep.Consumers {
		t.Logf("promoted consumer %s on %s: start seq %d (existed %v, err %v)", c.Name, c.Stream, c.StartSeq, c.Existed, c.Err)
	}
	for _, p := range rolesB {
		if _, err := p.WaitReady(180 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	readyAt := time.Now()
	// Region c mirrored the lost region: it becomes b's standby (its mirrors deleted and made
	// anew from domain b, a full copy), while the load goes on in b.
	repointStart := time.Now()
	for _, name := range natsutil.RegionStreams(spec) {
		if err := jsC.DeleteStream(ctx, name); err != nil {
			t.Fatalf("c: delete mirror %s: %v", name, err)
		}
	}
	if err := natsutil.ProvisionStandby(ctx, jsC, spec, "b"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	time.Sleep(3 * time.Second) // late duplicates
	loadDone := time.Now()
	// c caught up with b once the load has stopped.
	var cBehind []string
	for _, name := range natsutil.RegionStreams(spec) {
		want := uint64(0)
		if st, err := natsutil.Stream(ctx, jsB, name); err == nil {
			want = st.CachedInfo().State.LastSeq
		}
		for {
			st, err := natsutil.Stream(ctx, jsC, name)
			if err == nil && st.CachedInfo().State.LastSeq >= want && natsutil.MirrorDomain(st.CachedInfo().Config.Mirror) == "b" {
				break
			}
			if time.Since(loadDone) > time.Minute {
				cBehind = append(cBehind, name)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	cCaughtUp := time.Now()

	// Region a's server again, alone (no leaf node: it must not take part), to count what it
	// held that b's mirrors had not received.
	notMirrored := map[string]uint64{}
	notMirroredIDs := map[string]bool{} // messages whose inbound, context or reply a held past b's mirror
	pb := map[string]uint64{}
	for _, s := range rep.Streams {
		pb[s.Name] = s.LastSeq
	}
	{
		startNATS("a", 0, "-after")
		_, jsA2 := connect("a")
		mu.Lock()
		ids := make([]string, 0, len(allSent))
		for _, s := range allSent {
			ids = append(ids, s.id)
		}
		mu.Unlock()
		for _, name := range natsutil.RegionStreams(spec) {
			st, err := natsutil.Stream(ctx, jsA2, name)
			if err != nil {
				t.Logf("a after restart: %s: %v", name, err)
				continue
			}
			last := st.CachedInfo().State.LastSeq
			if last <= pb[name] {
				continue
			}
			notMirrored[name] = last - pb[name]
			for seq := pb[name] + 1; seq <= last; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil {
					continue
				}
				data := string(m.Data)
				for _, id := range ids {
					// The message id field, or the text "... m <id>" (inbound) and "... m <id> [" (reply).
					if strings.Contains(data, `"`+id+`"`) || strings.Contains(data, " "+id+`"`) || strings.Contains(data, " "+id+" [") {
						notMirroredIDs[id] = true
					}
				}
			}
		}
	}

	// The reminder: fired once, by b (after the kill, a being gone), into b's inbox.
	if *regionsSchedule > 0 {
		var fired []reply
		for _, r := range cb.all() {
			if r.Scene.ID == sched.sceneID && r.ReplyTo != sched.id {
				fired = append(fired, r)
			}
		}
		var firedAt time.Time
		if st, err := natsutil.Stream(ctx, jsB, events.StreamSessionIn); err == nil {
			if m, err := st.GetLastMsgForSubject(ctx, events.AgentInSubject(sched.key())); err == nil && m.Header.Get(jetstream.SchedulerHeader) != "" {
				firedAt = m.Time
			}
		}
		switch {
		case len(fired) == 1:
			t.Logf("reminder scheduled in a for %s (kill + %s): fired by b into its inbox at %s (%s after the schedule, %s after promotion), answered at %s",
				schedAt.Format("15:04:05"), schedAt.Sub(killAt).Round(time.Millisecond), firedAt.Format("15:04:05.000"),
				firedAt.Sub(schedAt).Round(time.Millisecond), firedAt.Sub(promotedAt).Round(time.Millisecond), fired[0].At.Format("15:04:05.000"))
		default:
			t.Errorf("reminder scheduled in a for %s (promoted at %s): %d replies, want 1; fired into b's inbox: %v", schedAt.Format("15:04:05"),
				promotedAt.Format("15:04:05.000"), len(fired), !firedAt.IsZero())
		}
	}

	mu.Lock()
	defer mu.Unlock()
	got := cb.all()
	byID := map[string][]reply{}
	for _, r := range got {
		byID[r.ReplyTo] = append(byID[r.ReplyTo], r)
	}
	var lost, lostMirrored, dups []string
	resent, resentOld := 0, 0
	firstAfter := map[string]time.Time{} // session → its first reply after the kill
	inFlight := map[string]bool{}        // sessions with a message unanswered at the kill
	mustResume := map[string]bool{}      // sessions b has to answer (see below)
	for _, s := range allSent {
		rs := byID[s.id]
		ids := map[string]bool{}
		for _, r := range rs {
			ids[r.ID] = true
			if r.At.After(killAt) {
				if f, ok := firstAfter[s.session]; !ok || r.At.Before(f) {
					firstAfter[s.session] = r.At
				}
			}
		}
		resent += len(rs) - len(ids)
		if s.at.Before(killAt) && (len(rs) == 0 || rs[0].At.After(killAt)) {
			inFlight[s.session] = true
		}
		// A session must be answered by b when it had a message in flight that was not lost,
		// or sent one after the kill (a session whose one message in flight was lost and whose
		// chat ended while waiting for it has nothing left to answer).
		if (s.at.Before(killAt) && len(rs) > 0 && rs[0].At.After(killAt)) || !s.at.Before(killAt) {
			mustResume[s.session] = true
		}
		switch {
		case len(rs) == 0:
			lost = append(lost, s.id)
			if !notMirroredIDs[s.id] {
				lostMirrored = append(lostMirrored, s.id)
			}
		case len(ids) > 1:
			dups = append(dups, fmt.Sprintf("%s×%d", s.id, len(ids)))
		}
	}
	for _, r := range got {
		if r.At.After(killAt) && repliedBeforeKill[r.ID] {
			resentOld++
		}
	}
	var resume []time.Duration
	var neverResumed []string
	for sess := range inFlight {
		if f, ok := firstAfter[sess]; ok {
			resume = append(resume, f.Sub(killAt))
		}
	}
	for sess := range mustResume {
		if _, ok := firstAfter[sess]; !ok {
			neverResumed = append(neverResumed, sess)
		}
	}
	slices.Sort(resume)
	rec.mu.Lock()
	twice := 0
	for _, n := range rec.n {
		if n > 1 {
			twice++
		}
	}
	rec.mu.Unlock()
	pct := func(d []time.Duration, p float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return d[min(len(d)-1, int(float64(len(d))*p))].Round(time.Millisecond)
	}

	t.Logf("regions: a live, b standby (roles waiting), c mirrors only; %d JetStream server(s) each (streams at %d replicas), leaf nodes of a hub; %d sessions, %s of load, %d messages, %d replies, %d POSTs",
		nodes, nodes, *regionsSessions, *regionsDuration, len(allSent), len(got), posts)
	for _, name := range delayStreams {
		d := slices.Clone(delays[name])
		slices.Sort(d)
		t.Logf("mirror delay a → b while live, %s: %d messages, p50 %s p99 %s max %s", name, len(d), pct(d, 0.5), pct(d, 0.99), pct(d, 1))
	}
	var behind []string
	for _, name := range natsutil.RegionStreams(spec) {
		if l, ok := lagAtKill[name]; ok && l[0] > l[1] {
			behind = append(behind, fmt.Sprintf("%s %d", name, l[0]-l[1]))
		}
	}
	t.Logf("mirror lag read just before the kill (messages a had, b not yet): %v", behind)
	var nm []string
	for _, name := range natsutil.RegionStreams(spec) {
		if n := notMirrored[name]; n > 0 {
			nm = append(nm, fmt.Sprintf("%s %d", name, n))
		}
	}
	t.Logf("accepted by a but never mirrored to b (a's store after the kill vs b at promotion): %v", nm)
	t.Logf("kill → promote started %s, promote took %s, kill → b's roles ready %s, kill → end of load %s",
		promoteStart.Sub(killAt).Round(time.Millisecond), promotedAt.Sub(promoteStart).Round(time.Millisecond),
		readyAt.Sub(killAt).Round(time.Millisecond), loadDone.Sub(killAt).Round(time.Millisecond))
	t.Logf("region c re-pointed to b: mirrors made anew at %s after the kill, every mirror caught up with b %s after the load stopped; behind after a minute: %v",
		repointStart.Sub(killAt).Round(time.Millisecond), cCaughtUp.Sub(loadDone).Round(time.Millisecond), cBehind)
	if len(cBehind) > 0 {
		t.Errorf("region c's mirrors of b behind after a minute: %v", cBehind)
	}
	t.Logf("sessions in flight at the kill: %d, answered again by b: %d; kill → first reply from b p50 %s p99 %s max %s; sessions b had to answer and never did %d",
		len(inFlight), len(resume), pct(resume, 0.5), pct(resume, 0.99), pct(resume, 1), len(neverResumed))
	t.Logf("lost %d (of them inbound never mirrored %d, mirrored %d), duplicates %d, parts sent again under the same id %d (replies delivered before the kill sent again by b: %d), tools run twice %d",
		len(lost), len(lost)-len(lostMirrored), len(lostMirrored), len(dups), resent, resentOld, twice)
	if len(dups) > 0 {
		t.Errorf("duplicate replies: %v", dups)
	}
	if len(lostMirrored) > 0 {
		t.Errorf("lost although b's mirror had the message (or it was not found in a's store): %v", lostMirrored)
	}
	if len(neverResumed) > 0 {
		t.Errorf("sessions never answered after the failover: %v", neverResumed)
	}
}
