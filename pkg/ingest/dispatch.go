// Package ingest turns inbound IM messages into bus events: the MessageDispatcher decides what
// reaches the session inbox (SESSION_IN): a turn (user_message), context only (listen), a
// command, or nothing. Each normalized message is stored once: in the inbox events that carry
// it, or, when none does, in IM_IN (issue 40; events.InboundMessage reads both).
package ingest

import (
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/command"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
)

// Route is what the dispatcher decided for one message.
type Route int

const (
	RouteIgnore  Route = iota // nothing reaches the session (stored in IM_IN only)
	RouteListen               // group message not addressed to the bot: context, no turn
	RouteAI                   // start (or join) a turn
	RouteCommand              // a known command
)

func (r Route) String() string {
	return [...]string{"ignore", "listen", "ai", "command"}[r]
}

// Decision is the dispatcher's verdict. In dual mode both Command and AI may be set; Routes
// lists what to do, in order.
type Decision struct {
	Routes  []Route
	Command *events.Command // set when RouteCommand is in Routes
	Text    string          // the text the model sees (trigger prefix and mention removed)
	Reason  string          // why, for logs
}

// Has reports whether r is among the routes.
func (d Decision) Has(r Route) bool { return slices.Contains(d.Routes, r) }

// MayRun reports whether sender may run command name in a scene of scope: the command's
// Access in pkg/command's table. A name not in the table is allowed: the session answers
// "Unknown command".
func MayRun(name, scope string, sender events.Sender) bool {
	c, ok := command.Lookup(name)
	return !ok || c.Access.Allows(scope, sender)
}

// Defaults of Trigger (docs/configuration.md, ai.trigger).
var (
	DefaultPrefixes       = []string{"ai:"}
	DefaultIgnorePrefixes = []string{"/", "!", "！"}
)

// Trigger says which messages start a turn (ai.trigger; pkg/app maps the block here). The
// zero value is the documented default: every private message and every @ of the bot in a
// group triggers, "ai:" is stripped in private chats, "/", "!" and "！" never trigger.
type Trigger struct {
	// Off: no message starts a turn (ai.trigger.enabled: false); commands still work.
	Off bool
	// Prefixes: in a private chat a message starting with one (case-insensitive) triggers
	// with the prefix stripped. nil: DefaultPrefixes; empty: none.
	Prefixes []string
	// PrivateNeedsPrefix: in a private chat only prefixed messages trigger
	// (ai.trigger.respondToPrivate: false).
	PrivateNeedsPrefix bool
	// IgnoreMentions: an @ of the bot in a group does not trigger (ai.trigger.respondToAt:
	// false); the group is only listened to.
	IgnoreMentions bool
	// IgnorePrefixes: messages starting with one never trigger. nil: DefaultIgnorePrefixes;
	// empty: none.
	IgnorePrefixes []string
	// Masters and Trusted are sender ids with that role on every bot and platform.
	Masters, Trusted []string
}

// setDefaults fills the nil lists with their defaults.
func (t *Trigger) setDefaults() {
	if t.Prefixes == nil {
		t.Prefixes = DefaultPrefixes
	}
	if t.IgnorePrefixes == nil {
		t.IgnorePrefixes = DefaultIgnorePrefixes
	}
}

// Dispatch says what a message that is both a command and addressed to the AI causes
// (ai.dispatcher). The zero value is exclusive, command first: the command only.
type Dispatch struct {
	// Dual judges the command and the AI separately (mode dual): with AllowDualReply both
	// run, in the order AIFirst says; without, only the first of them.
	Dual, AIFirst, AllowDualReply bool
}

// Dispatcher applies a Trigger and a Dispatch.
type Dispatcher struct {
	trigger Trigger
	mode    Dispatch
}

// NewDispatcher returns a dispatcher; nil lists of t take their defaults.
func NewDispatcher(t Trigger, mode Dispatch) *Dispatcher {
	t.setDefaults()
	return &Dispatcher{trigger: t, mode: mode}
}

// Dispatch decides what m causes. m.MentionsBot and m.Sender.Roles must already be filled.
func (d *Dispatcher) Dispatch(m *events.IMMessage) Decision {
	text := strings.TrimSpace(identity.StripSpoofedSender(textWithoutMentions(m)))
	cmd := parseCommand(text, m)
	aiDecision, aiReason := d.wantsAI(m, text)
	if cmd == nil && (m.Scene.Type == events.ScopePrivate || m.MentionsBot) {
		cmd = unknownCommand(text, m) // answered "unknown command", never silently ignored
	}

	var dec Decision
	dec.Text = aiDecision
	switch {
	case cmd != nil && !d.mode.Dual:
		dec.Routes, dec.Command, dec.Reason = []Route{RouteCommand}, cmd, "command"
		return dec
	case cmd != nil: // dual: command and AI judged separately
		dec.Command = cmd
		both := aiReason == "" && aiDecision != ""
		switch {
		case !both:
			dec.Routes = []Route{RouteCommand}
		case !d.mode.AllowDualReply && d.mode.AIFirst:
			dec.Routes = []Route{RouteAI}
		case !d.mode.AllowDualReply:
			dec.Routes = []Route{RouteCommand}
		case d.mode.AIFirst:
			dec.Routes = []Route{RouteAI, RouteCommand}
		default:
			dec.Routes = []Route{RouteCommand, RouteAI}
		}
		dec.Reason = "dual"
		return dec
	}
	if aiReason == "" {
		dec.Routes, dec.Reason = []Route{RouteAI}, "trigger"
		return dec
	}
	dec.Reason = aiReason
	if m.Scene.Type != events.ScopePrivate && aiReason == "not addressed" {
		dec.Routes = []Route{RouteListen}
		return dec
	}
	dec.Routes = []Route{RouteIgnore}
	return dec
}

// wantsAI returns the text for the model and "" when the message triggers a turn, or a reason
// why it does not.
func (d *Dispatcher) wantsAI(m *events.IMMessage, text string) (string, string) {
	if d.trigger.Off {
		return "", "trigger disabled"
	}
	for _, p := range d.trigger.IgnorePrefixes {
		if p != "" && strings.HasPrefix(text, p) {
			return "", "ignored prefix " + p
		}
	}
	hasContent := text != "" || m.Content.HasMedia()
	if m.Scene.Type == events.ScopePrivate {
		for _, p := range d.trigger.Prefixes {
			if p != "" && strings.HasPrefix(strings.ToLower(text), strings.ToLower(p)) {
				stripped := strings.TrimSpace(text[len(p):])
				if stripped == "" && !m.Content.HasMedia() {
					return "", "empty after prefix"
				}
				return stripped, ""
			}
		}
		if !d.trigger.PrivateNeedsPrefix && hasContent {
			return text, ""
		}
		return "", "private trigger off"
	}
	// Groups and channels: only an @ of the bot triggers; prefixes do not (seed: 群/频道不用此前缀触发).
	if m.MentionsBot && !d.trigger.IgnoreMentions {
		if !hasContent {
			return "", "empty mention"
		}
		return text, ""
	}
	return "", "not addressed"
}

func parseCommand(text string, m *events.IMMessage) *events.Command {
	if !strings.HasPrefix(text, "/") {
		return nil
	}
	fields := strings.Fields(text[1:])
	if len(fields) == 0 {
		return nil
	}
	name, ok := commandFor(fields[0], m)
	if !ok {
		return nil
	}
	// Only the table's commands are commands here; another "/word" is text (or, addressed
	// to the bot, unknownCommand's business).
	if _, known := command.Lookup(name); !known {
		return nil
	}
	rest := strings.TrimSpace(strings.TrimPrefix(text[1:], fields[0]))
	mc := *m
	return &events.Command{Name: name, Args: fields[1:], Raw: rest, Message: &mc}
}

// commandFor returns the command name of word (after the "/"), lower-cased. A name addressed
// to a bot ("/reset@name", as Telegram writes commands in groups) is the bot's only when name is
// its configured id; adapters whose platform addresses commands so (Telegram) remove the bot's
// own suffix before ingest, so a suffix left is another bot's and ok is false.
func commandFor(word string, m *events.IMMessage) (name string, ok bool) {
	name = strings.ToLower(word)
	if i := strings.IndexByte(name, '@'); i > 0 {
		if !strings.EqualFold(word[i+1:], m.Bot) {
			return "", false
		}
		name = name[:i]
	}
	return name, true
}

// textWithoutMentions is the message's text with @-mentions of anyone dropped: the bot's own
// mention is the trigger, not content, and other mentions are kept as "@name".
func textWithoutMentions(m *events.IMMessage) string {
	var b strings.Builder
	leading := false // the text so far is the bot's own mention only
	for _, s := range m.Content {
		switch s.Type {
		case events.SegText:
			t := s.Str("text")
			if leading {
				// "@Bot: /reset", "@Bot, /reset" (how clients address someone): the separator after
				// the leading mention goes with it.
				t = strings.TrimLeft(t, " ")
				for _, sep := range []string{":", ",", "：", "，"} {
					t = strings.TrimPrefix(t, sep)
				}
				leading = strings.TrimSpace(t) == ""
			}
			b.WriteString(t)
		case events.SegAt:
			if s.IsSelfMention(m.Bot) { // wherever it stands: "@bot /reset" is the command /reset
				leading = leading || strings.TrimSpace(b.String()) == ""
				continue
			}
			leading = false
			b.WriteByte('@')
			if n := strings.TrimPrefix(s.Str("name"), "@"); n != "" {
				b.WriteString(n)
			} else {
				b.WriteString(s.MentionID())
			}
			b.WriteByte(' ')
		}
	}
	return identity.StripBotMention(b.String(), m)
}

// Roles computes a sender's roles: always user; master and trusted from configuration (the
// bot's lists and ai.trigger's); platform roles as the adapter reported them.
func Roles(senderID string, platformRoles []string, masters, trusted []string) []string {
	roles := []string{"user"}
	for _, r := range platformRoles {
		switch r {
		case "group_admin", "admin":
			roles = appendOnce(roles, "group_admin")
		case "group_owner", "owner":
			roles = appendOnce(roles, "group_owner")
		}
	}
	if slices.Contains(trusted, senderID) {
		roles = appendOnce(roles, "trusted")
	}
	if slices.Contains(masters, senderID) {
		roles = appendOnce(roles, "trusted")
		roles = appendOnce(roles, "master")
	}
	return roles
}

func appendOnce(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}
