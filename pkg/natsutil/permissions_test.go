package natsutil_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
			{false, "$KV.tool_markers.c1", false},
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
			{false, "$KV.tool_markers.c1", true},    // started markers of non-idempotent calls
			{false, "$KV.delivered.tool.c1", false}, // where older versions wrote them: egress's bucket
			{false, "$KV.delivered.o1", false},
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
			{false, "$KV.tool_markers.c1", false},
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
		{natsutil.RoleEgress, events.StreamSessionIn, true}, // the transcript archive (issue 40)
		{natsutil.RoleIngest, events.StreamAgentEvents, false},
		{natsutil.RoleTurnWorker, events.StreamAgentCtx, true},
		// The archive of ended epochs is the conversation too: only its writer reads it.
		{natsutil.RoleToolWorker, "OBJ_" + events.ObjectEpochs, false},
		{natsutil.RoleEgress, "OBJ_" + events.ObjectEpochs, false},
		{natsutil.RoleIngest, "OBJ_" + events.ObjectEpochs, false},
		{natsutil.RoleTurnWorker, "OBJ_" + events.ObjectEpochs, true},
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

// roleJS connects as role (with its inbox prefix) and returns its JetStream context.
func roleJS(t *testing.T, url, role, password string) (jetstream.JetStream, chan error) {
	t.Helper()
	nc, errs := roleConn(t, url, role, password)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, errs
}

// TestMaliciousRoles: what a role's user could try against the others beyond publishing on
// subjects it may not, each refused by the server with deploy/nats-auth.conf's permissions and
// events.Spec's stream flags: roll-ups and purges that empty streams it may write to, message
// deletes, deleting, updating or pulling from another role's durable consumers, changing or
// deleting streams, reading buckets it has no business with, hearing or answering another
// role's replies. Afterwards every stream holds what it held before.
func TestMaliciousRoles(t *testing.T) {
	url, pw := startAuthServer(t)
	admin, _ := roleConn(t, url, natsutil.RoleAdmin, pw[natsutil.RoleAdmin])
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := natsutil.Provision(ctx, ajs, events.DefaultSpec()); err != nil {
		t.Fatal(err)
	}
	js := map[string]jetstream.JetStream{}
	for _, r := range []string{natsutil.RoleIngest, natsutil.RoleTurnWorker, natsutil.RoleToolWorker, natsutil.RoleEgress} {
		js[r], _ = roleJS(t, url, r, pw[r])
	}
	// The owners create their durables, as the roles do when they start.
	for _, d := range natsutil.Durables {
		if _, err := js[d.Owner].CreateOrUpdateConsumer(ctx, d.Stream, jetstream.ConsumerConfig{Durable: d.Name, FilterSubject: durableFilter(d.Name),
			AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatalf("%s creates its consumer %s on %s: %v", d.Owner, d.Name, d.Stream, err)
		}
	}
	// What the roles write in the normal course of things.
	seed := []struct{ role, subject string }{
		{natsutil.RoleIngest, "im.in.webhook.b1.private.u1"},
		{natsutil.RoleIngest, "agent.in.webhook_b1_private_u1"},
		{natsutil.RoleTurnWorker, "agent.evt.webhook_b1_private_u1.t1.turn_started"},
		{natsutil.RoleTurnWorker, "agent.ctx.webhook_b1_private_u1.1"},
		{natsutil.RoleTurnWorker, "im.out.webhook.b1.private.u1"},
		{natsutil.RoleTurnWorker, "task.deferred.t1"},
		{natsutil.RoleTurnWorker, "$KV.sessions.webhook_b1_private_u1"},
		{natsutil.RoleTurnWorker, "$KV.approvals.webhook_b1"},
		{natsutil.RoleTurnWorker, "$KV.models.openai"},
		{natsutil.RoleToolWorker, "tool.result.webhook_b1_private_u1.c1"},
		{natsutil.RoleToolWorker, "$KV.tasks.webhook_b1_private_u1.t1"},
		{natsutil.RoleToolWorker, "$KV.tool_markers.c1"},
		{natsutil.RoleEgress, "$KV.delivered.o1"},
		{natsutil.RoleToolWorker, "$KV.profiles.webhook.u1"},
		{natsutil.RoleToolWorker, "$KV.approvals.webhook_b1.pending"},
		{natsutil.RoleEgress, "im.sent.webhook.b1.private.u1"},
		{natsutil.RoleEgress, "dlq.egress.x"},
	}
	for _, s := range seed {
		if _, err := js[s.role].Publish(ctx, s.subject, []byte(`{"seed":true}`)); err != nil {
			t.Fatalf("%s publishes %s: %v", s.role, s.subject, err)
		}
	}
	counts := func() map[string]uint64 {
		out := map[string]uint64{}
		for name := range ajs.StreamNames(ctx).Name() {
			st, err := ajs.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = st.CachedInfo().State.Msgs
		}
		return out
	}
	before := counts()

	// Each attack gets a few seconds: a request the server refuses for permissions gets no
	// answer at all, so the attacks run in parallel (in the group "attacks", which ends when
	// they all have).
	t.Run("attacks", func(t *testing.T) { attacks(t, url, pw, js, ajs, seed) })
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	after := counts()
	for name, n := range before {
		if after[name] != n {
			t.Errorf("stream %s holds %d messages, had %d", name, after[name], n)
		}
	}
	for _, d := range natsutil.Durables {
		if _, err := ajs.Consumer(ctx, d.Stream, d.Name); err != nil {
			t.Errorf("consumer %s/%s: %v", d.Stream, d.Name, err)
		}
	}
}

func attacks(t *testing.T, url string, pw map[string]string, js map[string]jetstream.JetStream, ajs jetstream.JetStream, seed []struct{ role, subject string }) {
	var wg sync.WaitGroup
	defer wg.Wait()
	attack := func(name string, f func(ctx context.Context) error) {
		wg.Add(1)
		go func() { // not t.Parallel: that runs only GOMAXPROCS at a time
			defer wg.Done()
			actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer acancel()
			if err := f(actx); err == nil {
				t.Errorf("%s: allowed", name)
			}
		}()
	}
	rollup := func(role, subject string) {
		attack(role+" rolls up "+subject, func(ctx context.Context) error {
			m := nats.NewMsg(subject)
			m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
			m.Data = []byte("gone")
			_, err := js[role].PublishMsg(ctx, m)
			return err
		})
	}
	for _, s := range seed {
		if strings.HasPrefix(s.subject, events.PrefixAgentIn+".") {
			continue // SESSION_IN allows roll-ups (message schedules need them): see TestStreamFlags
		}
		if strings.HasPrefix(s.subject, "$KV."+events.BucketToolMarkers+".") {
			continue // the tool workers' own markers, which they purge (roll-ups): see TestStreamFlags
		}
		rollup(s.role, s.subject)
	}
	// KV tool_markers allows roll-ups, so only the tool worker may publish there: nobody else
	// can write, purge or empty the started markers of non-idempotent calls, and the tool worker
	// can no longer write KV delivered, where older versions kept them (egress's records).
	for _, role := range []string{natsutil.RoleIngest, natsutil.RoleTurnWorker, natsutil.RoleEgress} {
		rollup(role, "$KV."+events.BucketToolMarkers+".c1")
		attack(role+" writes a tool marker", func(ctx context.Context) error {
			_, err := js[role].Publish(ctx, "$KV."+events.BucketToolMarkers+".c2", []byte(`{"worker":"evil"}`))
			return err
		})
	}
	attack("tool-worker marks a reply delivered", func(ctx context.Context) error {
		_, err := js[natsutil.RoleToolWorker].Publish(ctx, "$KV."+events.BucketDelivered+".o2", []byte(`{}`))
		return err
	})
	purge := func(role, stream string) {
		attack(role+" purges "+stream, func(ctx context.Context) error {
			st, err := js[role].Stream(ctx, stream)
			if err != nil {
				return err
			}
			return st.Purge(ctx)
		})
	}
	for role, streams := range map[string][]string{
		natsutil.RoleToolWorker: {events.StreamSessionIn, events.StreamTasks, events.StreamToolResults, "KV_tasks", "KV_tools", "KV_delivered", "KV_approvals", "KV_" + events.BucketToolMarkers},
		natsutil.RoleIngest:     {events.StreamIMIn, events.StreamSessionIn, "KV_profiles"},
		natsutil.RoleEgress:     {events.StreamIMSent, "KV_delivered", "OBJ_media", "OBJ_" + events.ObjectEpochs, "KV_" + events.BucketToolMarkers},
		// The turn worker purges SESSION_IN (an archived epoch's part of the inbox, see
		// store.EpochArchive); as a publisher there it could roll the stream up anyway.
		natsutil.RoleTurnWorker: {events.StreamAgentEvents, "KV_sessions", events.StreamTasks, "OBJ_" + events.ObjectEpochs},
	} {
		for _, st := range streams {
			purge(role, st)
		}
	}
	// The flags hold even for the admin: history is not deleted or purged by anyone.
	attack("admin purges IM_IN", func(ctx context.Context) error {
		st, err := ajs.Stream(ctx, events.StreamIMIn)
		if err != nil {
			return err
		}
		return st.Purge(ctx)
	})
	attack("admin deletes a message of AGENT_EVENTS", func(ctx context.Context) error {
		st, err := ajs.Stream(ctx, events.StreamAgentEvents)
		if err != nil {
			return err
		}
		return st.DeleteMsg(ctx, 1)
	})
	for role, stream := range map[string]string{natsutil.RoleToolWorker: "KV_tasks", natsutil.RoleIngest: events.StreamIMIn,
		natsutil.RoleEgress: events.StreamIMSent, natsutil.RoleTurnWorker: events.StreamAgentEvents} {
		attack(role+" deletes a message of "+stream, func(ctx context.Context) error {
			st, err := js[role].Stream(ctx, stream)
			if err != nil {
				return err
			}
			return st.DeleteMsg(ctx, 1)
		})
		attack(role+" updates "+stream, func(ctx context.Context) error {
			st, err := js[role].Stream(ctx, stream)
			if err != nil {
				return err
			}
			cfg := st.CachedInfo().Config
			cfg.MaxAge = time.Second
			_, err = js[role].UpdateStream(ctx, cfg)
			return err
		})
		attack(role+" deletes "+stream, func(ctx context.Context) error { return js[role].DeleteStream(ctx, stream) })
	}
	// Other roles' durable consumers: not deleted, not replaced, not pulled from.
	for _, d := range natsutil.Durables {
		for role := range js {
			if role == d.Owner {
				continue
			}
			attack(role+" deletes "+d.Stream+"/"+d.Name, func(ctx context.Context) error { return js[role].DeleteConsumer(ctx, d.Stream, d.Name) })
			attack(role+" replaces "+d.Stream+"/"+d.Name, func(ctx context.Context) error {
				_, err := js[role].CreateOrUpdateConsumer(ctx, d.Stream, jetstream.ConsumerConfig{Durable: d.Name, FilterSubject: durableFilter(d.Name),
					AckPolicy: jetstream.AckExplicitPolicy, Description: "hijacked"})
				return err
			})
			attack(role+" pulls from "+d.Stream+"/"+d.Name, func(ctx context.Context) error {
				c, err := js[role].Consumer(ctx, d.Stream, d.Name)
				if err != nil {
					return err
				}
				_, err = c.Next(jetstream.FetchMaxWait(2 * time.Second))
				return err
			})
		}
	}
	// Consumers on streams the role has no business with.
	for role, stream := range map[string]string{natsutil.RoleToolWorker: events.StreamTasks, natsutil.RoleIngest: events.StreamTasks,
		natsutil.RoleEgress: events.StreamTasks, natsutil.RoleTurnWorker: events.StreamToolCalls} {
		attack(role+" consumes "+stream, func(ctx context.Context) error {
			// A work queue takes non-overlapping consumers: one on a subject nobody works.
			filter := map[string]string{events.StreamTasks: "task.evil.>", events.StreamToolCalls: "tool.call.evil"}[stream]
			_, err := js[role].CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "evil", FilterSubject: filter})
			return err
		})
	}
	// Buckets it may not read, by get and by watch.
	for role, bucket := range map[string]string{natsutil.RoleToolWorker: events.BucketSessions, natsutil.RoleEgress: events.BucketApprovals} {
		attack(role+" reads KV "+bucket, func(ctx context.Context) error {
			kv, err := js[role].KeyValue(ctx, bucket)
			if err != nil {
				return err
			}
			_, err = kv.Get(ctx, "webhook_b1_private_u1")
			if err == nil {
				return nil
			}
			_, err = kv.Get(ctx, "webhook_b1")
			return err
		})
		attack(role+" watches KV "+bucket, func(ctx context.Context) error {
			kv, err := js[role].KeyValue(ctx, bucket)
			if err != nil {
				return err
			}
			w, err := kv.WatchAll(ctx)
			if err != nil {
				return err
			}
			defer w.Stop()
			select {
			case e := <-w.Updates():
				if e != nil {
					return nil // it read an entry
				}
				return errors.New("unexpected end of history") // the empty marker: it could watch
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}
	// The tool worker may write its pending confirmations, never the approvals themselves.
	attack("tool-worker writes an approval", func(ctx context.Context) error {
		_, err := js[natsutil.RoleToolWorker].Publish(ctx, "$KV.approvals.webhook_b1", []byte(`{"always":["bash"]}`))
		return err
	})
	attack("tool-worker answers into the turn worker's inbox", func(ctx context.Context) error {
		nc, errs := roleConn(t, url, natsutil.RoleToolWorker, pw[natsutil.RoleToolWorker])
		if err := nc.Publish(natsutil.InboxPrefix(natsutil.RoleTurnWorker)+".x", []byte("forged reply")); err != nil {
			return err
		}
		if _, refused := violation(errs, 4*time.Second); refused {
			return errors.New("refused")
		}
		return nil
	})
}

// durableFilter is the filter the turn worker gives its TASKS consumers.
func durableFilter(name string) string {
	switch name {
	case "deferred":
		return "task.deferred.>"
	case "subagents":
		return "task.subagent.>"
	}
	return ""
}

// TestStreamFlags pins which streams allow roll-ups (and so purges): each is one any publisher
// on it may empty, so docs/security.md lists them with who publishes there.
func TestStreamFlags(t *testing.T) {
	spec := events.DefaultSpec()
	rollups := map[string]bool{}
	for _, c := range spec.Streams() {
		if c.AllowRollup {
			rollups[c.Name] = true
		}
		if c.AllowRollup && c.DenyPurge {
			t.Errorf("%s: roll-ups without the purge permission", c.Name)
		}
	}
	for _, c := range spec.KeyValues() {
		if events.KVRollup(c) {
			rollups["KV_"+c.Bucket] = true
		}
	}
	want := map[string]bool{events.StreamSessionIn: true, "KV_" + events.BucketLeases: true, "KV_" + events.BucketTools: true,
		"KV_" + events.BucketToolMarkers: true}
	if len(rollups) != len(want) {
		t.Errorf("streams with roll-ups: %v, want %v (update docs/security.md)", rollups, want)
	}
	for n := range want {
		if !rollups[n] {
			t.Errorf("%s does not allow roll-ups any more: update docs/security.md", n)
		}
	}
}
