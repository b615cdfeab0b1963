package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// Publisher is the part of jetstream.JetStream ingest needs.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// BotRoles holds who is master and trusted for one bot (ai.trigger lists plus the bot's own).
type BotRoles struct {
	Masters []string
	Trusted []string
}

// Ingestor normalizes, archives and dispatches inbound messages. It is safe for concurrent use;
// every replica of the ingest role may run one.
type Ingestor struct {
	js    Publisher
	inbox inboxPublisher
	disp  *Dispatcher
	ai    config.AI
	log   *slog.Logger
	// roles per "platform/bot"
	roles map[string]BotRoles
	media MediaStore // nil: inline media stays in the event (WithMedia)
	// tracer records ingest's spans (nil: off, SetTracer).
	tracer trace.TracerProvider
}

// SetTracer makes ingest record a span per message (and the webhook adapter one per request)
// with tp; without it, or with a no-op tp, nothing is recorded. Call it before serving.
func (in *Ingestor) SetTracer(tp trace.TracerProvider) { in.tracer = tp }

// New returns an Ingestor. bots maps "platform/bot" to its role lists; ai.trigger's masters
// and trusted apply to every bot.
func New(js Publisher, ai config.AI, bots map[string]BotRoles, log *slog.Logger) *Ingestor {
	if log == nil {
		log = slog.Default()
	}
	var ib inboxPublisher = plainInbox{js}
	if full, ok := js.(jetstream.JetStream); ok {
		ib = inbox.NewPublisher(full)
	}
	return &Ingestor{js: js, inbox: ib, disp: NewDispatcher(ai), ai: ai, log: log, roles: bots}
}

// inboxPublisher publishes a session's inbox events. A Publisher that is a whole
// jetstream.JetStream (every real one) gets inbox.Publisher, which chains each session's events
// so that the session's actor finds the next one without a scan (package inbox); a bare
// Publisher (a test double) publishes them as they are, which readers handle too.
type inboxPublisher interface {
	Publish(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error)
}

type plainInbox struct{ js Publisher }

func (p plainInbox) Publish(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	return p.js.PublishMsg(ctx, m)
}

// Result says what happened to one message.
type Result struct {
	Duplicate bool     // IM_IN had already seen this platform message id
	Decision  Decision // what the dispatcher decided
}

// Ingest publishes m to IM_IN (deduplicated on the platform message id) and dispatches it to
// the session inbox. It fills m.MentionsBot and the sender's roles.
//
// It is safe to call again with the same message after a failure: every publish carries a
// Nats-Msg-Id derived from the platform message id, so JetStream drops the repeats and a
// message that reached IM_IN but not SESSION_IN is completed by the retry.
//
// With tracing on, the message gets a span "ingest <platform>" (a child of the webhook request's
// span, whose inbound traceparent it continues) and every event it publishes carries that span
// in events.HeaderSpanContext; the trace id is the event's envelope trace.
func (in *Ingestor) Ingest(ctx context.Context, m *events.IMMessage) (Result, error) {
	if !tracing.Enabled(in.tracer) {
		return in.ingest(ctx, m) // off: not even the span's options are built
	}
	ctx, span := tracing.Start(ctx, in.tracer, "ingest "+m.Platform, "", "", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("agentbus.platform", m.Platform)))
	res, err := in.ingest(ctx, m)
	tracing.End(span, err)
	return res, err
}

func (in *Ingestor) ingest(ctx context.Context, m *events.IMMessage) (Result, error) {
	m.MentionsBot = m.MentionsBot || m.Content.Mentions(m.Bot)
	m.Sender.Roles = in.senderRoles(m)
	if err := in.storeInline(ctx, m); err != nil {
		return Result{}, err
	}
	if err := m.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %v", events.ErrInvalid, err)
	}
	sk := m.SessionKey()
	session := sk.String()
	trace := tracing.TraceID(ctx) // the span's, or an inbound traceparent's: one trace id, not two
	if trace == "" {
		trace = events.NewTraceID()
	}
	imEv := events.New(*m, events.WithSession(session), events.WithTrace(trace))
	msg, err := events.NewMsg(events.IMInSubject(sk), imEv)
	if err != nil {
		return Result{}, err
	}
	tracing.InjectNATS(ctx, msg.Header)
	ack, err := in.js.PublishMsg(ctx, msg)
	if err != nil {
		return Result{}, fmt.Errorf("publish im.in %s: %w", m.MsgID(), err)
	}
	res := Result{Duplicate: ack.Duplicate}
	res.Decision = in.disp.Dispatch(m)
	// Built only when something is logged: most messages log nothing above debug.
	log := func() *slog.Logger { return in.log.With("session", session, "msg", m.MessageID, "trace", trace) }
	for i, r := range res.Decision.Routes {
		var ev events.Any
		switch r {
		case RouteIgnore:
			continue
		case RouteListen:
			ev = events.New(events.Listen{Message: *m, IMSeq: ack.Sequence})
		case RouteAI:
			ev = events.New(events.UserMessage{Message: *m, Text: res.Decision.Text, IMSeq: ack.Sequence})
		case RouteCommand:
			c := *res.Decision.Command
			if !MayRun(c.Name, m.Scene.Type, m.Sender) {
				if err := in.refuse(ctx, m, sk, c.Name, trace); err != nil {
					return res, err
				}
				log().Info("refused command", "command", c.Name, "sender", m.Sender.ID)
				continue
			}
			ev = commandEvent(c, m)
		}
		meta := ev.EventMeta()
		meta.Session, meta.Trace = session, trace
		// One inbound message may cause two inbox events (dual mode); each needs its own stable id.
		meta.ID = stableID(m, i)
		out, err := events.NewMsg(events.AgentInSubject(sk), ev)
		if err != nil {
			return res, err
		}
		tracing.InjectNATS(ctx, out.Header)
		if _, err := in.inbox.Publish(ctx, out); err != nil {
			return res, fmt.Errorf("publish agent.in %s: %w", m.MsgID(), err)
		}
	}
	if in.log.Enabled(ctx, slog.LevelDebug) {
		log().Debug("ingested", "routes", fmt.Sprint(res.Decision.Routes), "reason", res.Decision.Reason, "duplicate", res.Duplicate)
	}
	return res, nil
}

// senderRoles computes m's sender roles (Roles) from ai.trigger's and the bot's lists without
// merging the lists per message.
func (in *Ingestor) senderRoles(m *events.IMMessage) []string {
	br := in.roles[m.Platform+"/"+m.Bot]
	id := m.Sender.ID
	roles := Roles(id, m.Sender.Roles, nil, nil)
	master := slices.Contains(in.ai.Trigger.Masters, id) || slices.Contains(br.Masters, id) ||
		m.Platform == PlatformConsole // whoever reaches the bus is the operator: console users are masters
	if master || slices.Contains(in.ai.Trigger.Trusted, id) || slices.Contains(br.Trusted, id) {
		roles = appendOnce(roles, "trusted")
	}
	if master {
		roles = appendOnce(roles, "master")
	}
	return roles
}

// commandEvent maps /steer and /followup to their own inbox kinds, /cancel to abort; the rest
// stay commands for the session actor.
func commandEvent(c events.Command, m *events.IMMessage) events.Any {
	switch c.Name {
	case "steer":
		return events.New(events.Steer{Text: c.Raw, Sender: m.Sender, ReplyTo: m.MessageID, Message: m})
	case "followup":
		return events.New(events.FollowUp{Text: c.Raw, Sender: m.Sender, ReplyTo: m.MessageID, Message: m})
	case "cancel":
		return events.New(events.Abort{Reason: "cancelled by " + m.Sender.ID, Sender: m.Sender, ReplyTo: m.MessageID})
	}
	return events.New(c)
}

// idSafe makes a message id readable as part of an event id.
var idSafe = strings.NewReplacer("/", "_", ".", "_")

func stableID(m *events.IMMessage, i int) string {
	id := "in-" + idSafe.Replace(m.MsgID())
	if i > 0 {
		id += "-" + strconv.Itoa(i)
	}
	return id
}

// refuse answers a non-master's master-only command directly, without bothering the session.
func (in *Ingestor) refuse(ctx context.Context, m *events.IMMessage, sk events.SessionKey, name, trace string) error {
	text := refusalText(name)
	out := events.Outbound{
		OutID: "refusal-" + stableID(m, 0), Part: 0, Platform: m.Platform, Bot: m.Bot,
		Scene: m.Scene, ReplyTo: m.MessageID, Content: events.Segments{events.TextSeg(text)}, Final: true,
	}
	ev := events.New(out, events.WithSession(sk.String()), events.WithTrace(trace))
	msg, err := events.NewMsg(events.IMOutSubject(sk), ev)
	if err != nil {
		return err
	}
	tracing.InjectNATS(ctx, msg.Header)
	if _, err := in.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish refusal: %w", err)
	}
	return nil
}

// IsInvalid reports whether err is a rejected message (as opposed to a bus failure).
func IsInvalid(err error) bool { return errors.Is(err, events.ErrInvalid) }
