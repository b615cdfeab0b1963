package natsutil_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// freePort is a loopback TCP port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// regionServer starts a nats-server: the leaf-node hub (domain "", no JetStream, listening
// for leaf nodes on leafPort) or a region (JetStream in domain, a leaf node of the hub).
func regionServer(t *testing.T, domain string, leafPort int) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, ServerName: "region-" + domain}
	if domain == "" {
		o.ServerName = "hub"
		o.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}
	} else {
		u, _ := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort))
		o.JetStream, o.JetStreamDomain, o.StoreDir = true, domain, t.TempDir()
		o.LeafNode = server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}}
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	if domain == "" {
		return s, nil, nil
	}
	// The hub runs already (the tests start it first): the leaf connection comes up.
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(s.NumLeafNodes() > 0, "region %s has no leaf connection to the hub", domain)
	})
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s, nc, js
}

// TestRegionPromote: region a live, region b its standby (mirrors across domains through a
// leaf-node hub); a consumer acknowledges three of five replies in a, a's checkpoint is
// mirrored; a dies; b is promoted: every stream is live with its subjects and the flags a mirror
// cannot have, the KV state is there, the consumer starts after the checkpointed ack floor (it
// delivers replies 4 and 5 only), a role asking for "everything" keeps that start, and
// ProvisionStandby refuses the now live streams.
func TestRegionPromote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leaf := freePort(t)
	regionServer(t, "", leaf)
	sa, _, jsA := regionServer(t, "a", leaf)
	_, _, jsB := regionServer(t, "b", leaf)
	spec := events.DefaultSpec()
	if err := natsutil.Provision(ctx, jsA, spec); err != nil {
		t.Fatal(err)
	}
	if err := natsutil.ProvisionRegion(ctx, jsA, spec); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := jsA.Publish(ctx, events.PrefixIMOut+".s.x", []byte(fmt.Sprint("reply ", i))); err != nil {
			t.Fatal(err)
		}
	}
	sessA, err := jsA.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessA.Put(ctx, "k1", []byte("record")); err != nil {
		t.Fatal(err)
	}
	const durable = "egress_test"
	cons, err := natsutil.Consumer(ctx, jsA, events.StreamIMOut, jetstream.ConsumerConfig{Durable: durable,
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := natsutil.NewCheckpointer(ctx, jsA, spec)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := cp.Once(ctx); err != nil || n == 0 {
		t.Fatalf("checkpoint: wrote %d, %v", n, err)
	}

	// A reminder in a's SESSION_IN due a few seconds after a is lost: b's mirror copies it, and
	// it must fire in b once promoted (Promote re-arms it).
	schedSubj, target := events.PrefixSchedule+".s1.followup", events.PrefixAgentIn+".s1"
	due := time.Now().Add(6 * time.Second).Truncate(time.Second)
	sm := nats.NewMsg(schedSubj)
	sm.Data = []byte("reminder")
	sm.Header.Set(jetstream.ScheduleHeader, "@at "+due.UTC().Format(time.RFC3339))
	sm.Header.Set(jetstream.ScheduleTargetHeader, target)
	sm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := jsA.PublishMsg(ctx, sm); err != nil {
		t.Fatal(err)
	}

	for range 2 { // the second run finds the mirrors and changes nothing
		if err := natsutil.ProvisionStandby(ctx, jsB, spec, "a"); err != nil {
			t.Fatal(err)
		}
	}
	// Every mirror catches up with its origin before a dies.
	for _, name := range natsutil.RegionStreams(spec) {
		want := streamInfo(ctx, t, jsA, name).State.LastSeq
		testwait.Eventually(t, 0, func() error {
			got := streamInfo(ctx, t, jsB, name)
			if natsutil.MirrorDomain(got.Config.Mirror) != "a" || len(got.Config.Subjects) != 0 {
				t.Fatalf("%s in b: %+v, want a mirror of domain a without subjects", name, got.Config)
			}
			return testwait.Want(got.State.LastSeq >= want, "%s in b: seq %d, a has %d", name, got.State.LastSeq, want)
		})
	}
	sa.Shutdown()
	if time.Now().After(due) {
		t.Fatalf("a was shut down after its reminder was due (%s): the machine is too slow for this test's margin", due)
	}

	rep, err := natsutil.Promote(ctx, jsB, spec)
	if err != nil {
		t.Fatal(err)
	}
	mirrors := 0
	for _, s := range rep.Streams {
		if s.WasMirror {
			mirrors++
		}
	}
	if mirrors != len(natsutil.RegionStreams(spec)) {
		t.Errorf("promoted %d mirrors, want %d", mirrors, len(natsutil.RegionStreams(spec)))
	}
	for _, sc := range spec.Streams() {
		got := streamInfo(ctx, t, jsB, sc.Name).Config
		if got.Mirror != nil || fmt.Sprint(got.Subjects) != fmt.Sprint(sc.Subjects) ||
			got.AllowAtomicPublish != sc.AllowAtomicPublish || got.AllowMsgSchedules != sc.AllowMsgSchedules {
			t.Errorf("%s after promotion: mirror %v subjects %v atomic %v schedules %v; want live %v %v %v",
				sc.Name, got.Mirror, got.Subjects, got.AllowAtomicPublish, got.AllowMsgSchedules, sc.Subjects, sc.AllowAtomicPublish, sc.AllowMsgSchedules)
		}
	}
	for _, s := range rep.Streams {
		if want := map[bool]int{true: 1}[s.Name == events.StreamSessionIn]; s.Schedules != want {
			t.Errorf("%s: %d schedules re-armed, want %d", s.Name, s.Schedules, want)
		}
	}
	sessIn, err := jsB.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := sessIn.GetLastMsgForSubject(ctx, target)
		if err == nil {
			if m.Header.Get(jetstream.SchedulerHeader) != schedSubj || string(m.Data) != "reminder" {
				t.Fatalf("%s in b: %q with headers %v, want the reminder fired by %s", target, m.Data, m.Header, schedSubj)
			}
			t.Logf("the reminder due %s fired in promoted b at %s", due.Format("15:04:05"), m.Time.Format("15:04:05.000"))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the reminder due %s never fired in promoted b: %v", due.Format("15:04:05"), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := streamInfo(ctx, t, jsB, "KV_"+events.BucketLeases).Config; got.SubjectDeleteMarkerTTL != spec.MarkerTTL {
		t.Errorf("KV_leases delete-marker TTL %s after promotion, want %s", got.SubjectDeleteMarkerTTL, spec.MarkerTTL)
	}
	sessB, err := jsB.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := sessB.Get(ctx, "k1"); err != nil || string(e.Value()) != "record" {
		t.Fatalf("session record in b: %v %v", e, err)
	}
	if _, err := sessB.Put(ctx, "k2", []byte("new")); err != nil {
		t.Fatalf("write in promoted b: %v", err)
	}

	var pc *natsutil.PromotedConsumer
	for i, c := range rep.Consumers {
		if c.Stream == events.StreamIMOut && c.Name == durable {
			pc = &rep.Consumers[i]
		}
	}
	if pc == nil || pc.StartSeq != 4 || pc.Existed {
		t.Fatalf("consumer %s after promotion: %+v, want created to start at seq 4", durable, pc)
	}
	// The role starts and asks for everything: the consumer keeps its start.
	consB, err := natsutil.Consumer(ctx, jsB, events.StreamIMOut, jetstream.ConsumerConfig{Durable: durable,
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy, Description: "role"})
	if err != nil {
		t.Fatal(err)
	}
	batch, err = consB.Fetch(5, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		_ = m.Ack()
	}
	if fmt.Sprint(got) != "[reply 4 reply 5]" {
		t.Errorf("promoted consumer delivered %q, want replies 4 and 5 only", got)
	}
	if _, err := jsB.Publish(ctx, events.PrefixIMOut+".s.x", []byte("reply 6")); err != nil {
		t.Fatalf("publish in promoted b: %v", err)
	}
	if err := natsutil.ProvisionStandby(ctx, jsB, spec, "a"); !errors.Is(err, natsutil.ErrLiveStream) {
		t.Errorf("standby provisioning of promoted streams: %v, want ErrLiveStream", err)
	}
	if rep2, err := natsutil.Promote(ctx, jsB, spec); err != nil {
		t.Errorf("second promotion: %v", err)
	} else {
		for _, s := range rep2.Streams {
			if s.WasMirror {
				t.Errorf("second promotion found %s a mirror", s.Name)
			}
		}
	}
}

func streamInfo(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return st.CachedInfo()
}
