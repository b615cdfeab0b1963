package natsutil

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agentbus/agentbus/pkg/events"
)

// BusRole is one NATS identity of a production deployment and what it may publish and
// subscribe to. The table (BusRoles) is the one definition: deploy/nats-auth.conf is rendered
// from it (RenderAuthConf, checked by a test), `agentbus up` gives its embedded server the same
// users (EmbeddedUsers), and the permission tests run a real server with it.
//
// What each role publishes follows what its code does:
//
//   - ingest: the inbound streams (im.in, agent.in: user messages, commands), refusals on im.out,
//     profiles, its adapters' leases, the chunks a relayed OneBot send went out as (KV
//     delivered chunk.>), dead letters; it answers console.in requests.
//   - turn-worker: the session's events and context (agent.evt, agent.ctx), tool calls, replies
//     (im.out), live deltas, the replicas' doorbells (agent.wake), tasks, schedules (it writes
//     the reminders schedule_followup asks for, see turn's applyFollowUp), subagent results into
//     agent.in, session/lease/approval/profile/model KVs, the archive of ended epochs (object
//     store epochs) and, once an epoch is archived there, purging its context subject and its
//     part of the session's inbox; withdrawing a tool call nobody serves (a message delete on
//     TOOL_CALLS).
//   - tool-worker: tool results, the tool registry KV, profiles, the started markers of its
//     non-idempotent calls (KV tool_markers, which no other role writes; it reads, never writes,
//     KV delivered, where older versions kept them, so it cannot mark a reply delivered), its
//     pending bash confirmations (the <endpoint>.pending keys of KV approvals, not the
//     approvals themselves), the transcript search request, dead letters, the probes of each
//     other's running calls (tool.attempt); background work its tools queue (task.> for
//     spawn_task and run_deferred_task, KV tasks). Not agent.in, im.in, im.out nor schedule.>:
//     a tool (the bash sandbox included) cannot put words in a master's mouth, speak to a chat
//     directly, nor make the bot speak later. A task it queues claims nothing the turn worker
//     believes: the turn worker derives the caller from the turn that asked (turn's
//     taskOrigin).
//   - egress: receipts (im.sent), delivered records (KV delivered), console.out, dead letters; it serves the
//     transcript search (a NATS micro service).
//   - every role: its own entry in KV presence (pkg/presence), which status and the console read.
//   - admin: everything (provisioning streams and buckets, operators' CLI).
//
// Every role may read stream info, message gets, direct gets, consumers (create, fetch, ack,
// flow control), except the streams it has no business with (NoRead): the tool worker, which
// runs commands a stranger asked for, cannot read any conversation (SESSION_IN, AGENT_EVENTS,
// AGENT_CTX, IM_IN, IM_OUT, IM_SENT) nor the session and lease records; egress and ingest
// cannot read the turn's own log (egress reads the inboxes, SESSION_IN, for the transcript
// archive: the inbound messages are stored there since issue 40). No role may touch another role's durable consumers (Durables:
// create, update, delete, pause, fetch from, ack for) nor consume a work queue it does not
// work (NoConsume). No role but admin may create, update, delete or purge a stream or delete
// a message ($JS.API.STREAM.CREATE/UPDATE/DELETE/PURGE, MSG.DELETE), except the turn worker's
// purges (AGENT_CTX, SESSION_IN) and its message delete above. Each role hears replies only on its own inbox prefix (InboxPrefix), so no role
// reads the answers another role's requests get (a direct get of a conversation, say), and no
// role publishes into another's inbox: replies go out only as responses (allow_responses).
//
// What publish permissions cannot stop, the streams' flags do (events.Spec): a publisher may
// ask for a roll-up (Nats-Rollup: all empties the whole stream) wherever the stream allows
// roll-ups, so roll-ups are allowed only where they are needed and only the owning roles may
// publish there. See docs/security.md for what remains.
type BusRole struct {
	Name      string
	Publish   []string
	Subscribe []string
	// NoRead lists streams the role may neither consume nor get messages from (KV buckets as
	// their streams, KV_<bucket>).
	NoRead []string
	// NoConsume lists streams the role may get messages from but not consume (work queues
	// another role works).
	NoConsume []string
	// Responses lets the role answer requests it received (reply subjects of core requests).
	Responses bool
}

// Durable is a durable consumer the code creates and which role owns it. Consumers whose
// names are made at run time (tool_<tool> on TOOL_CALLS, transcripts-<node>-* on IM_IN,
// SESSION_IN and IM_SENT) are covered by NoConsume/NoRead of the other roles instead.
type Durable struct {
	Stream, Name, Owner string
}

// Durables are the named durable consumers of agentbus.
var Durables = []Durable{
	{events.StreamSessionIn, "turn-workers", RoleTurnWorker},
	{events.StreamTasks, "deferred", RoleTurnWorker},
	{events.StreamTasks, "subagents", RoleTurnWorker},
	{events.StreamIMOut, "egress", RoleEgress},
}

// jsRead is the JetStream API every role uses to read and consume.
var jsRead = []string{
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.>", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
	"$JS.API.STREAM.MSG.GET.>", "$JS.API.DIRECT.GET.>",
	"$JS.API.CONSUMER.>",
	"$JS.ACK.>", "$JS.FC.>",
}

// consumeAPI is every JetStream API subject that consumes stream: creating, updating,
// deleting, pausing and reading consumers of it, fetching from them and acking for them.
func consumeAPI(stream string) []string {
	return []string{
		"$JS.API.CONSUMER.*." + stream, "$JS.API.CONSUMER.*." + stream + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + ".>",
		"$JS.ACK." + stream + ".>",
	}
}

// readAPI is every JetStream API subject that reads stream: consumers of it (consumeAPI),
// message gets and direct gets.
func readAPI(stream string) []string {
	return append(consumeAPI(stream),
		"$JS.API.STREAM.MSG.GET."+stream,
		"$JS.API.DIRECT.GET."+stream, "$JS.API.DIRECT.GET."+stream+".>",
	)
}

// durableAPI is every JetStream API subject that acts on durable consumer d of stream.
func durableAPI(stream, d string) []string {
	return []string{
		"$JS.API.CONSUMER.*." + stream + "." + d, "$JS.API.CONSUMER.*." + stream + "." + d + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + "." + d,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + d,
		"$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + "." + d,
		"$JS.ACK." + stream + "." + d + ".>",
	}
}

// InboxPrefix is the reply-subject prefix of role's connections (nats.CustomInboxPrefix): the
// role's user may subscribe only below it.
func InboxPrefix(role string) string { return "_INBOX_" + role }

// IsBusRole reports whether name is a role of BusRoles other than admin (a user whose
// connections must use InboxPrefix).
func IsBusRole(name string) bool {
	switch name {
	case RoleIngest, RoleTurnWorker, RoleToolWorker, RoleEgress:
		return true
	}
	return false
}

// conversation are the streams that hold what people said and what the bot answered.
var conversation = []string{
	events.StreamSessionIn, events.StreamAgentEvents, events.StreamAgentCtx,
	events.StreamIMIn, events.StreamIMOut, events.StreamIMSent, objEpochs,
}

// objEpochs is the stream of the object store of archived epochs (the conversation of
// ended epochs): only the turn worker, which writes it, and admin read it.
const objEpochs = "OBJ_" + events.ObjectEpochs

func kvStream(bucket string) string { return "KV_" + bucket }

func kv(buckets ...string) []string {
	out := make([]string, len(buckets))
	for i, b := range buckets {
		out[i] = "$KV." + b + ".>"
	}
	return out
}

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Role names, also the NATS user names.
const (
	RoleIngest     = "ingest"
	RoleTurnWorker = "turn-worker"
	RoleToolWorker = "tool-worker"
	RoleEgress     = "egress"
	RoleAdmin      = "admin"
)

// BusRoles is the permission table (admin last: no restriction).
func BusRoles() []BusRole {
	inbox := func(role string) []string { return []string{InboxPrefix(role) + ".>"} }
	return []BusRole{
		{
			Name: RoleIngest,
			// leases: the single connection of an IM adapter (pkg/im.Hold). delivered.chunk:
			// the holder of a OneBot connection records the chunks it sent for egress
			// (pkg/im.Ledger), never egress's own out-id markers.
			Publish: join(jsRead, []string{"im.in.>", "agent.in.>", "im.out.>", "dlq.>", "$KV." + events.BucketDelivered + ".chunk.>"},
				kv("profiles", "leases", events.BucketPresence), []string{"$O.media.>"}),
			// im.rpc: egress relays sends to the replica holding a OneBot WebSocket.
			Subscribe: join(inbox(RoleIngest), []string{"console.in", "im.rpc.>"}),
			Responses: true,
			NoRead:    []string{events.StreamAgentEvents, events.StreamAgentCtx, events.StreamToolCalls, events.StreamToolResults, objEpochs},
			NoConsume: []string{events.StreamTasks},
		},
		{
			Name: RoleTurnWorker,
			Publish: join(jsRead, []string{
				"agent.in.>", "agent.evt.>", "agent.ctx.>", "agent.live.>", "agent.wake.>",
				"tool.call.>", "tool.result.>", "im.out.>", "task.>", "schedule.>", "dlq.>", "hooks.>",
				// llm.>: providers on the bus (api: bus, pkg/llmbus); their cancel messages go to
				// the reply subject of the events they send (allow_responses).
				"llm.>",
				"$JS.API.STREAM.PURGE.AGENT_CTX", "$JS.API.STREAM.MSG.DELETE.TOOL_CALLS", "transcripts.search",
				// An ended epoch, once archived in object store epochs, is trimmed from its
				// inbox and its context log (store.EpochArchive).
				"$JS.API.STREAM.PURGE.SESSION_IN",
			}, kv("sessions", "leases", "approvals", "profiles", "models", "tools", "tasks", events.BucketPresence),
				[]string{"$O.media.>", "$O." + events.ObjectEpochs + ".>"}),
			// Tool results are also awaited as core messages on the session's subject; the
			// replicas ring and probe each other's doorbells (agent.wake.<replica>); a
			// session's owner hears its inbox subject (agent.in.<sk>) as core messages, to
			// read a new event without waiting for its delivery.
			Subscribe: join(inbox(RoleTurnWorker), []string{"tool.result.>", "agent.wake.>", "agent.in.>"}),
			Responses: true,
			NoConsume: []string{events.StreamToolCalls},
		},
		{
			Name: RoleToolWorker,
			// tool.attempt: a redelivered non-idempotent call asks the process that started it
			// whether it still runs (a request to tool.attempt.<instance>, answered by that
			// process). $KV.approvals.*.pending: the bash confirmations it records and
			// consumes (approvals.PendingKey); the approvals themselves are the turn worker's.
			Publish: join(jsRead, []string{"tool.result.>", "tool.attempt.>", "dlq.>", "transcripts.search", "task.>", "hooks.>",
				"$KV." + events.BucketApprovals + ".*.pending"},
				kv("tools", "profiles", events.BucketToolMarkers, "tasks", events.BucketPresence), []string{"$O.media.>"}),
			Subscribe: join(inbox(RoleToolWorker), []string{"tool.attempt.>"}),
			Responses: true,
			NoRead: append(slices.Clone(conversation), kvStream(events.BucketSessions), kvStream(events.BucketLeases),
				kvStream(events.BucketWebhookSeen)),
			NoConsume: []string{events.StreamTasks},
		},
		{
			Name: RoleEgress,
			// leases: one replica per bot shows previews; im.rpc and im.preview reach the replica
			// holding a bot's connection or preview.
			Publish: join(jsRead, []string{"im.sent.>", "console.out.>", "dlq.>", "im.rpc.>", "im.preview.>", "hooks.>"},
				kv("delivered", "leases", events.BucketPresence), []string{"$O.media.>"}),
			Subscribe: join(inbox(RoleEgress), []string{"transcripts.search", "$SRV.>", "agent.live.>", "im.preview.>"}),
			Responses: true,
			// SESSION_IN is read by the transcript archiver: since issue 40 a message that
			// reaches a session is stored there only, inside its inbox event (egress read
			// every inbound message on IM_IN before). The turn workers' durable stays theirs.
			NoRead: []string{events.StreamAgentEvents, events.StreamAgentCtx,
				events.StreamToolCalls, events.StreamToolResults, kvStream(events.BucketSessions), kvStream(events.BucketApprovals), objEpochs},
			NoConsume: []string{events.StreamTasks},
		},
		{Name: RoleAdmin},
	}
}

// Permissions is r as nats-server permissions (nil for admin: no restriction).
func (r BusRole) Permissions() *server.Permissions {
	if r.Publish == nil && r.Subscribe == nil {
		return nil
	}
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: append([]string(nil), r.Publish...)},
		Subscribe: &server.SubjectPermission{Allow: append([]string(nil), r.Subscribe...)},
	}
	for _, st := range r.NoRead {
		p.Publish.Deny = append(p.Publish.Deny, readAPI(st)...)
	}
	for _, st := range r.NoConsume {
		p.Publish.Deny = append(p.Publish.Deny, consumeAPI(st)...)
	}
	for _, d := range Durables {
		if d.Owner != r.Name && !slices.Contains(r.NoRead, d.Stream) && !slices.Contains(r.NoConsume, d.Stream) {
			p.Publish.Deny = append(p.Publish.Deny, durableAPI(d.Stream, d.Name)...)
		}
	}
	if r.Responses {
		p.Response = &server.ResponsePermission{MaxMsgs: 1}
	}
	return p
}

// PasswordEnv is the environment variable deploy/nats-auth.conf reads role's password from.
func PasswordEnv(role string) string {
	return "AGENTBUS_NATS_" + strings.ToUpper(strings.ReplaceAll(role, "-", "_")) + "_PASSWORD"
}

// RenderAuthConf renders BusRoles as a nats-server configuration block (deploy/nats-auth.conf),
// each password read from the environment (PasswordEnv).
func RenderAuthConf() string {
	var b strings.Builder
	b.WriteString("# Generated from pkg/natsutil/permissions.go (BusRoles); do not edit by hand:\n")
	b.WriteString("#   go test ./pkg/natsutil -run TestAuthConfIsCurrent -update\n")
	b.WriteString("# One NATS user per role, least-privilege publish/subscribe; passwords from the environment.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, r := range BusRoles() {
		fmt.Fprintf(&b, "    {\n      user: %q\n      password: $%s\n", r.Name, PasswordEnv(r.Name))
		if p := r.Permissions(); p != nil {
			b.WriteString("      permissions: {\n")
			writeList(&b, "publish", p.Publish.Allow, p.Publish.Deny)
			writeList(&b, "subscribe", p.Subscribe.Allow, nil)
			if p.Response != nil {
				fmt.Fprintf(&b, "        allow_responses: { max: %d }\n", p.Response.MaxMsgs)
			}
			b.WriteString("      }\n")
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeList(b *strings.Builder, name string, allow, deny []string) {
	fmt.Fprintf(b, "        %s: { allow: [", name)
	writeSubjects(b, allow)
	b.WriteString("]")
	if len(deny) > 0 {
		b.WriteString(", deny: [")
		writeSubjects(b, deny)
		b.WriteString("]")
	}
	b.WriteString(" }\n")
}

func writeSubjects(b *strings.Builder, subjects []string) {
	for i, s := range subjects {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%q", s)
	}
}
