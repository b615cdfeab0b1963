package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// startClusterNode starts one node of the docker-compose cluster in-process: deploy/nats.conf,
// plus what docker-compose.yml passes on the command line (name, JetStream, store dir, cluster
// name, routes), on loopback ports of its own.
func startClusterNode(t *testing.T, name string, clusterPort int, routes []string) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats.conf"))
	if err != nil {
		t.Fatalf("deploy/nats.conf: %v", err)
	}
	if !opts.JetStream && opts.JetStreamMaxStore == 0 {
		t.Fatal("deploy/nats.conf has no jetstream block")
	}
	opts.ServerName = name
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPPort = 0 // monitoring is on 8222 in the containers; not needed here
	opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = "agentbus", "127.0.0.1", clusterPort
	opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
	opts.NoLog, opts.NoSigs = os.Getenv("AB_NATSLOG") == "", true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	if !opts.NoLog {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(waitMargin) {
		t.Fatalf("node %s not ready", name)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// TestDeployCluster runs the shape of docker-compose.yml without Docker: three JetStream nodes
// configured like the compose services, and each role in a process of its own configured from
// deploy/agentbus.yml, the way the role binaries run. Streams get three replicas, a webhook
// message is answered, and it still is after one node is shut down.
func TestDeployCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	// Like the compose services, every node routes to the other two, so the cluster ports
	// are chosen before any node starts.
	busPasswords(t) // deploy/nats.conf's users read their passwords from the environment
	ports := freePorts(t, 3)
	var nodes []*server.Server
	var urls []string
	for i := range 3 {
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
			}
		}
		n := startClusterNode(t, fmt.Sprintf("nats%d", i+1), ports[i], routes)
		nodes = append(nodes, n)
		urls = append(urls, n.ClientURL())
	}
	waitJetStreamCluster(t, strings.Join(urls, ","))
	provisionAsAdmin(t, strings.Join(urls, ","), events.Spec{Replicas: 3}.WithDefaults())

	model := fakeopenai.New(t, fakeopenai.Echo)
	cb := newCallback(t)
	t.Setenv("AGENTBUS_NATS_URL", strings.Join(urls, ","))
	t.Setenv("AGENTBUS_WEBHOOK_SECRET", botSecret)
	t.Setenv("AGENTBUS_WEBHOOK_CALLBACK", cb.srv.URL+"/callback")
	t.Setenv("OPENAI_API_KEY", "test-key")
	dataDir := t.TempDir()
	start := func(r app.Roles) *app.Process {
		t.Helper()
		roleUser(t, r) // each role is its own NATS user
		cfg, err := config.Load(filepath.Join("..", "..", "deploy", "agentbus.yml"))
		if err != nil {
			t.Fatalf("deploy/agentbus.yml: %v", err)
		}
		if len(cfg.MissingEnv) > 0 {
			t.Fatalf("deploy/agentbus.yml needs %v", cfg.MissingEnv)
		}
		// What differs from the containers: loopback ports, a temporary data directory, the
		// fake model instead of OpenAI.
		cfg.IM.Webhook.Listen = "127.0.0.1:0"
		cfg.DataDir = dataDir
		p := cfg.AI.Providers["openai"]
		p.BaseURL = model.BaseURL()
		cfg.AI.Providers["openai"] = p
		ctx, cancel := context.WithCancel(context.Background())
		proc, err := app.Start(ctx, cfg, app.Options{Roles: r, Out: io.Discard, Log: testLogger(), NoProbe: true})
		if err != nil {
			cancel()
			t.Fatalf("start %+v: %v", r, err)
		}
		t.Cleanup(func() { _ = proc.Stop(context.Background()); cancel() })
		return proc
	}
	// Stopped in reverse: egress last, so it can deliver what the turn worker published.
	egress := start(app.Roles{Egress: true})
	start(app.Roles{ToolWorker: true})
	start(app.Roles{TurnWorker: true})
	ingest := start(app.Roles{Ingest: true})
	if ingest.WebhookURL == "" {
		t.Fatal("the ingest process serves no webhook")
	}

	ctx := context.Background()
	for _, name := range []string{events.StreamSessionIn, events.StreamAgentCtx, events.StreamIMOut, "KV_" + events.BucketSessions} {
		s, err := egress.JS.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info := s.CachedInfo()
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("stream %s: %d replicas, cluster %+v", name, info.Config.Replicas, info.Cluster)
		}
	}

	pl := &pipeline{t: t, p: ingest, model: model, cb: cb}
	pl.postAccepted(private("c1", "ann", "hello cluster"))
	if got := pl.replies(1); !strings.Contains(got[0].Text(), "hello cluster") || !got[0].SigOK {
		t.Fatalf("reply %q (signature ok %v)", got[0].Text(), got[0].SigOK)
	}

	// One node goes away: R3 streams keep a quorum, clients reconnect to the others.
	nodes[1].Shutdown()
	nodes[1].WaitForShutdown()
	// While the streams that had a leader on it elect a new one, ingest answers 503 and the
	// platform retries, as platforms do.
	pl.postAccepted(private("c2", "ann", "still there?"))
	got, err := cb.wait(2, waitMargin)
	if err != nil {
		t.Fatalf("after losing a node: %v; replies: %s", err, fmtReplies(got))
	}
	if !strings.Contains(got[1].Text(), "still there?") {
		t.Fatalf("reply after losing a node: %q", got[1].Text())
	}
}

// postAccepted posts m until ingest accepts it (202). A 503 (a stream's leader is being
// elected, as after a node is lost or on a cluster that has just formed) is retried, as
// platforms retry; any other answer fails the test.
func (pl *pipeline) postAccepted(m msg) {
	pl.t.Helper()
	b := m.body()
	for deadline := time.Now().Add(waitMargin); ; time.Sleep(200 * time.Millisecond) {
		code, body := pl.postRaw(botID, b, webhook.Sign(botSecret, b))
		if code == http.StatusAccepted {
			return
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			pl.t.Fatalf("POST %s: %d %s", m.id, code, body)
		}
	}
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := childproc.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// waitJetStreamCluster waits until the cluster has a JetStream meta leader.
func waitJetStreamCluster(t *testing.T, urls string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMargin)
	defer cancel()
	if err := childproc.WaitJetStream(ctx, urls, adminAuth()); err != nil {
		t.Fatal(err)
	}
}
