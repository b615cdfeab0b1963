package natsutil

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// BusRole is one NATS identity of a production deployment and what it may publish and
// subscribe to. The table (BusRoles) is the one definition: deploy/nats-auth.conf is rendered
// from it (RenderAuthConf, checked by a test) and the permission tests run a real server with it.
//
// What each role publishes follows what its code does:
//
//   - ingest: the inbound streams (im.in, agent.in: user messages, commands), refusals on im.out,
//     its replay-protection KV, dead letters; it answers console.in requests.
//   - turn-worker: the session's events and context (agent.evt, agent.ctx), tool calls, replies
//     (im.out), live deltas, tasks, schedules, subagent results into agent.in, session/lease/
//     approval/profile/model KVs, and purging a session's context subject on /reset.
//   - tool-worker: tool results, the tool registry KV, profiles and delivered markers, the
//     transcript search request, dead letters. Not agent.in, im.in or im.out: a tool (the bash
//     sandbox included) cannot put words in a master's mouth nor speak to a chat directly.
//   - egress: receipts (im.sent), delivered markers, console.out, dead letters; it serves the
//     transcript search (a NATS micro service).
//   - admin: everything (provisioning streams and buckets, operators' CLI).
//
// Every role may read: stream info, message gets, direct gets, consumers (create, fetch, ack,
// flow control) and its request inboxes. No role but admin may create, update or delete a stream
// or consumer-less data ($JS.API.STREAM.CREATE/UPDATE/DELETE, MSG.DELETE).
type BusRole struct {
	Name      string
	Publish   []string
	Subscribe []string
	// Responses lets the role answer requests it received (reply subjects of core requests).
	Responses bool
}

// jsRead is the JetStream API every role uses to read and consume.
var jsRead = []string{
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.>", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
	"$JS.API.STREAM.MSG.GET.>", "$JS.API.DIRECT.GET.>",
	"$JS.API.CONSUMER.>",
	"$JS.ACK.>", "$JS.FC.>",
}

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
	inbox := []string{"_INBOX.>"}
	return []BusRole{
		{
			Name: RoleIngest,
			Publish: join(jsRead, []string{"im.in.>", "agent.in.>", "im.out.>", "dlq.>"},
				kv("webhook_seen", "profiles"), []string{"$O.media.>"}),
			Subscribe: join(inbox, []string{"console.in"}),
			Responses: true,
		},
		{
			Name: RoleTurnWorker,
			Publish: join(jsRead, []string{
				"agent.in.>", "agent.evt.>", "agent.ctx.>", "agent.live.>",
				"tool.call.>", "tool.result.>", "im.out.>", "task.>", "schedule.>", "dlq.>",
				"$JS.API.STREAM.PURGE.AGENT_CTX", "transcripts.search",
			}, kv("sessions", "leases", "approvals", "profiles", "models", "tools"), []string{"$O.media.>"}),
			// Tool results are also awaited as core messages on the session's subject.
			Subscribe: join(inbox, []string{"tool.result.>"}),
		},
		{
			Name: RoleToolWorker,
			Publish: join(jsRead, []string{"tool.result.>", "dlq.>", "transcripts.search"},
				kv("tools", "profiles", "delivered"), []string{"$O.media.>"}),
			Subscribe: inbox,
		},
		{
			Name: RoleEgress,
			Publish: join(jsRead, []string{"im.sent.>", "console.out.>", "dlq.>"},
				kv("delivered")),
			Subscribe: join(inbox, []string{"transcripts.search", "$SRV.>", "agent.live.>"}),
			Responses: true,
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
			writeList(&b, "publish", p.Publish.Allow)
			writeList(&b, "subscribe", p.Subscribe.Allow)
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

func writeList(b *strings.Builder, name string, subjects []string) {
	fmt.Fprintf(b, "        %s: { allow: [", name)
	for i, s := range subjects {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%q", s)
	}
	b.WriteString("] }\n")
}
