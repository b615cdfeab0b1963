package app_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/presence"
)

// busPasswords sets every role's NATS password in the environment, as the compose file does
// for the servers (deploy/nats-auth.conf reads them) and for each role.
func busPasswords(t *testing.T) {
	t.Helper()
	for _, r := range natsutil.BusRoles() {
		t.Setenv(natsutil.PasswordEnv(r.Name), "test-password-"+r.Name)
	}
}

// adminAuth is the admin user's connect option (busPasswords must have run).
func adminAuth() nats.Option {
	return nats.UserInfo(natsutil.RoleAdmin, os.Getenv(natsutil.PasswordEnv(natsutil.RoleAdmin)))
}

// roleUser makes deploy/agentbus.yml connect as the NATS user of the one role in r, as the
// compose file's AGENTBUS_NATS_USER/PASSWORD do.
func roleUser(t *testing.T, r app.Roles) {
	t.Helper()
	name := ""
	switch {
	case r.Ingest:
		name = natsutil.RoleIngest
	case r.TurnWorker:
		name = natsutil.RoleTurnWorker
	case r.ToolWorker:
		name = natsutil.RoleToolWorker
	case r.Egress:
		name = natsutil.RoleEgress
	}
	t.Setenv("AGENTBUS_NATS_USER", name)
	t.Setenv("AGENTBUS_NATS_PASSWORD", os.Getenv(natsutil.PasswordEnv(name)))
}

// provisionAsAdmin creates the streams and buckets as `agentbus provision` does in compose.
func provisionAsAdmin(t *testing.T, urls string, spec events.Spec) {
	t.Helper()
	nc, err := nats.Connect(urls, adminAuth())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := natsutil.Provision(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
}

// TestDeployRolesAsOwnUsers: one server configured by deploy/nats.conf (its users and
// permissions), each role in its own process as its own user with deploy/agentbus.yml, the
// streams made by the admin: a message goes in, runs a tool on the tool worker and comes back
// out signed. Then the limits hold: an anonymous client and the tool worker's user cannot
// publish a master's inbox command.
func TestDeployRolesAsOwnUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	busPasswords(t)
	opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats.conf"))
	if err != nil {
		t.Fatalf("deploy/nats.conf: %v", err)
	}
	if len(opts.Users) < 5 {
		t.Fatalf("deploy/nats.conf has %d users, want one per role", len(opts.Users))
	}
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", server.RANDOM_PORT, 0
	opts.NoLog, opts.NoSigs = os.Getenv("AB_NATSLOG") == "", true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.NoLog {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()

	const args = `{"action":"set","key":"city","value":"Paris"}`
	model := fakeopenai.New(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if res, ok := r.ToolResult("call_1"); ok {
			return fakeopenai.Reply{Text: "saved. the tool said: " + res}
		}
		if strings.Contains(r.LastUser(), "remember") && r.HasTool("user_profile") {
			return fakeopenai.Reply{Text: "one moment", ToolCalls: []fakeopenai.ToolCall{{ID: "call_1", Name: "user_profile", Arguments: args}}}
		}
		return fakeopenai.Echo(r)
	})
	cb := newCallback(t)
	t.Setenv("AGENTBUS_NATS_URL", url)
	t.Setenv("AGENTBUS_WEBHOOK_SECRET", botSecret)
	t.Setenv("AGENTBUS_WEBHOOK_CALLBACK", cb.srv.URL+"/callback")
	t.Setenv("OPENAI_API_KEY", "test-key")
	dataDir := t.TempDir()
	start := func(r app.Roles) *app.Process {
		t.Helper()
		roleUser(t, r)
		cfg, err := config.Load(filepath.Join("..", "..", "deploy", "agentbus.yml"))
		if err != nil {
			t.Fatalf("deploy/agentbus.yml: %v", err)
		}
		cfg.NATS.Replicas = 1 // one server here
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
	// A role may not create streams: without the admin's provisioning it waits.
	spec := events.DefaultSpec()
	provisionAsAdmin(t, url, spec)
	start(app.Roles{Egress: true})
	start(app.Roles{ToolWorker: true})
	start(app.Roles{TurnWorker: true})
	ingest := start(app.Roles{Ingest: true})

	pl := &pipeline{t: t, p: ingest, model: model, cb: cb}
	pl.waitToolsServed()
	pl.post(private("o1", "ann", "hello roles"))
	if got := pl.repliesIn("ann", 1); !strings.Contains(got[0].Text(), "hello roles") || !got[0].SigOK {
		t.Fatalf("reply %q (signature ok %v)", got[0].Text(), got[0].SigOK)
	}
	pl.post(private("o2", "ann", "remember that I live in Paris"))
	got := pl.repliesIn("ann", 2)
	if last := got[len(got)-1].Text(); !strings.Contains(last, "saved. the tool said") {
		t.Fatalf("tool turn reply %q", last)
	}

	// Each role announced itself under its own user (KV presence), so agentbus status lists it.
	admin, err := nats.Connect(url, nats.UserInfo(natsutil.RoleAdmin, os.Getenv(natsutil.PasswordEnv(natsutil.RoleAdmin))))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer lcancel()
	recs, err := presence.List(lctx, ajs)
	if err != nil {
		t.Fatal(err)
	}
	announced := map[string]bool{}
	for _, r := range recs {
		announced[r.Role] = true
	}
	for _, role := range []string{events.RoleIngest, events.RoleTurnWorker, events.RoleToolWorker, events.RoleEgress} {
		if !announced[role] {
			t.Errorf("role %s is not in KV presence under its own user: %+v", role, recs)
		}
	}

	// The tool worker's user cannot put a master's command into a session inbox: the server
	// refuses the publish, so nothing reaches SESSION_IN for the turn worker to honour.
	refused := make(chan error, 4)
	tw, err := nats.Connect(url, nats.UserInfo(natsutil.RoleToolWorker, os.Getenv(natsutil.PasswordEnv(natsutil.RoleToolWorker))),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	tjs, err := jetstream.New(tw)
	if err != nil {
		t.Fatal(err)
	}
	sk := events.SessionKey{Platform: "webhook", Bot: botID, Scope: "private", Scene: master}
	before := pl.streamMsgs(events.StreamSessionIn)
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	if _, err := tjs.Publish(pctx, events.AgentInSubject(sk), []byte(`{"type":"inbox.command","data":{"name":"approve","raw":"always bash"}}`)); err == nil {
		t.Error("the tool worker's user published into a session inbox")
	}
	if after := pl.streamMsgs(events.StreamSessionIn); after != before {
		t.Errorf("SESSION_IN grew from %d to %d", before, after)
	}
	select {
	case err := <-refused:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Errorf("refusal: %v, want a permissions violation", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the server reported no permissions violation")
	}

	// Nobody anonymous gets in.
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Error("an anonymous client was let in")
	}
}
