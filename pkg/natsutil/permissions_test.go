package natsutil_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

var update = flag.Bool("update", false, "rewrite deploy/nats-auth.conf from BusRoles")

var authConf = filepath.Join("..", "..", "deploy", "nats-auth.conf")

// TestAuthConfIsCurrent: deploy/nats-auth.conf is what BusRoles renders.
func TestAuthConfIsCurrent(t *testing.T) {
	want := natsutil.RenderAuthConf()
	if *update {
		if err := os.WriteFile(authConf, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(authConf)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not what BusRoles renders; run: go test ./pkg/natsutil -run TestAuthConfIsCurrent -update", authConf)
	}
}

// startAuthServer runs a JetStream server with deploy/nats-auth.conf's users, passwords set in
// the environment as the compose file does. It returns its URL and the passwords.
func startAuthServer(t *testing.T) (string, map[string]string) {
	t.Helper()
	pw := map[string]string{}
	for _, r := range natsutil.BusRoles() {
		pw[r.Name] = "pw-" + r.Name
		t.Setenv(natsutil.PasswordEnv(r.Name), pw[r.Name])
	}
	opts, err := server.ProcessConfigFile(authConf)
	if err != nil {
		t.Fatalf("%s: %v", authConf, err)
	}
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL(), pw
}

// roleConn connects as role and returns the connection and a channel of its async errors.
func roleConn(t *testing.T, url, role, password string) (*nats.Conn, chan error) {
	t.Helper()
	errs := make(chan error, 64)
	opts := []nats.Option{nats.UserInfo(role, password)}
	if natsutil.IsBusRole(role) {
		opts = append(opts, nats.CustomInboxPrefix(natsutil.InboxPrefix(role)))
	}
	nc, err := nats.Connect(url, append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))...)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// violation waits for a permissions violation on errs (true) or reports none within d.
func violation(errs chan error, d time.Duration) (error, bool) {
	select {
	case err := <-errs:
		return err, strings.Contains(strings.ToLower(err.Error()), "permissions violation")
	case <-time.After(d):
		return nil, false
	}
}

func TestRolePermissions(t *testing.T) {
	url, pw := startAuthServer(t)
	admin, _ := roleConn(t, url, natsutil.RoleAdmin, pw[natsutil.RoleAdmin])
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := natsutil.Provision(ctx, js, events.DefaultSpec()); err != nil {
		t.Fatal(err)
	}

	type op struct {
		sub     bool // subscribe instead of publish
		subject string
		allowed bool
	}
	tests := map[string][]op{
		natsutil.RoleIngest: {
			{false, "im.in.webhook.b1.private.u1", true},
			{false, "agent.in.webhook_b1_private_u1", true},
			{false, "$KV.webhook_seen.abc", false}, // the replay guard is IM_IN's dedupe window now
			{false, "agent.ctx.x.1", false},
			{false, "tool.result.x.c1", false},
			{false, "$KV.approvals.webhook.b1", false},
			{false, "$KV.sessions.x", false},
			{false, "$JS.API.STREAM.DELETE.AGENT_CTX", false},
			{false, "$JS.API.STREAM.UPDATE.IM_IN", false},
			{true, "agent.in.>", false},
		},
		natsutil.RoleTurnWorker: {
			{false, "agent.ctx.x.1", true},
			{false, "tool.call.bash", true},
			{false, "$KV.approvals.webhook.b1", true},
			{false, "$KV.tasks.x.t1", true},
			{false, "im.in.webhook.b1.private.u1", false},
			{false, "im.sent.webhook.b1.private.u1", false},
			{false, "$KV.delivered.x", false},
			{false, "$KV.webhook_seen.x", false},
			{false, "$JS.API.STREAM.PURGE.IM_IN", false},
			{false, "$JS.API.STREAM.MSG.DELETE.AGENT_EVENTS", false},
		},
		natsutil.RoleToolWorker: {
			{false, "tool.result.x.c1", true},
			{false, "$KV.tools.bash", true},
			{false, "task.deferred.t1", true},                         // run_deferred_task, spawn_task
			{false, "schedule.webhook_b1_private_u1.followup", false}, // the turn worker writes reminders
			{false, "$KV.approvals.webhook_b1.pending", true},         // its bash confirmations
			{true, "_INBOX.>", false},                                 // nobody else's replies
			{true, "_INBOX_turn-worker.>", false},
			{false, "$KV.tasks.x.t1", true},
			{false, "tool.attempt.i1", true}, // probing another worker's running call
			{true, "tool.attempt.>", true},
			{false, "agent.in.webhook_b1_private_u1", false}, // no master commands from a tool
			{false, "im.in.webhook.b1.private.u1", false},
			{false, "im.out.webhook.b1.private.u1", false}, // no direct chat output
			{false, "agent.ctx.x.1", false},
			{false, "$KV.approvals.webhook.b1", false},
			{false, "$KV.sessions.x", false},
			{false, "$JS.API.STREAM.DELETE.TOOL_CALLS", false},
			{true, "agent.live.>", false},
			{true, "console.in", false},
		},
		natsutil.RoleEgress: {
			{false, "im.sent.webhook.b1.private.u1", true},
			{false, "$KV.delivered.x", true},
			{false, "agent.in.webhook_b1_private_u1", false},
			{false, "im.out.webhook.b1.private.u1", false},
			{false, "im.in.webhook.b1.private.u1", false},
			{false, "$KV.approvals.webhook.b1", false},
			{false, "$JS.API.STREAM.CREATE.EVIL", false},
			{true, "console.in", false},
		},
	}
	for role, ops := range tests {
		for _, o := range ops {
			verb := "publish"
			if o.sub {
				verb = "subscribe"
			}
			t.Run(role+" "+verb+" "+o.subject, func(t *testing.T) {
				nc, errs := roleConn(t, url, role, pw[role])
				if o.sub {
					if _, err := nc.SubscribeSync(o.subject); err != nil {
						t.Fatal(err)
					}
				} else if err := nc.Publish(o.subject, []byte("x")); err != nil {
					t.Fatal(err)
				}
				if err := nc.Flush(); err != nil {
					t.Fatal(err)
				}
				wait := 300 * time.Millisecond
				if !o.allowed {
					wait = 10 * time.Second
				}
				err, refused := violation(errs, wait)
				if refused == o.allowed {
					t.Errorf("%s %s %s: refused=%v (%v), want allowed=%v", role, verb, o.subject, refused, err, o.allowed)
				}
			})
		}
	}

	// JetStream-level: a tool worker's forged master command is not even stored.
	nc, _ := roleConn(t, url, natsutil.RoleToolWorker, pw[natsutil.RoleToolWorker])
	tjs, _ := jetstream.New(nc)
	pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer pcancel()
	if _, err := tjs.Publish(pctx, "agent.in.webhook_b1_private_u1", []byte(`{"type":"inbox.command"}`)); err == nil {
		t.Error("a tool worker stored an inbox command")
	}
	st, err := js.Stream(context.Background(), events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter("agent.in.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["agent.in.webhook_b1_private_u1"]; n != 1 { // the one ingest published above; the tool worker's is not there
		t.Errorf("SESSION_IN holds %d inbox messages, want 1 (ingest's)", n)
	}
	// Reading: the tool worker cannot consume or get a conversation; what it needs still works.
	reads := []struct {
		role, stream string
		allowed      bool
	}{
		{natsutil.RoleToolWorker, events.StreamAgentCtx, false},
		{natsutil.RoleToolWorker, events.StreamSessionIn, false},
		{natsutil.RoleToolWorker, events.StreamIMIn, false},
		{natsutil.RoleToolWorker, "KV_" + events.BucketSessions, false},
		{natsutil.RoleToolWorker, events.StreamToolResults, true},
		{natsutil.RoleToolWorker, "KV_" + events.BucketApprovals, true},
		{natsutil.RoleEgress, events.StreamAgentCtx, false},
		{natsutil.RoleEgress, events.StreamIMOut, true},
		{natsutil.RoleIngest, events.StreamAgentEvents, false},
		{natsutil.RoleTurnWorker, events.StreamAgentCtx, true},
	}
	for _, r := range reads {
		t.Run(r.role+" reads "+r.stream, func(t *testing.T) {
			nc, _ := roleConn(t, url, r.role, pw[r.role])
			rjs, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			_, cerr := rjs.OrderedConsumer(rctx, r.stream, jetstream.OrderedConsumerConfig{})
			dreq, _ := json.Marshal(map[string]any{"seq": 1})
			_, derr := nc.RequestWithContext(rctx, "$JS.API.DIRECT.GET."+r.stream, dreq)
			if r.allowed && cerr != nil {
				t.Errorf("consumer refused: %v", cerr)
			}
			if !r.allowed && (cerr == nil || derr == nil) {
				t.Errorf("read allowed: consumer err %v, direct get err %v", cerr, derr)
			}
		})
	}

	// No anonymous client at all.
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Error("an anonymous client was let in")
	}
}
