package ingest

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentbus/agentbus/pkg/im/console"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/metrics"
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
	// masters and trusted are ids with that role on every bot (Trigger.Masters, .Trusted).
	masters, trusted []string
	log              *slog.Logger
	// roles per "platform/bot"
	roles map[string]BotRoles
	media MediaStore // nil: inline media stays in the event (WithMedia)
	// maxPayload is the bus's largest message (0: unknown, nothing is checked before publishing).
	maxPayload func() int64
	// metrics counts each message's outcome (nil: not counted; WithMetrics).
	metrics *metrics.Ingest
	// tracer records ingest's spans (nil: off, SetTracer).
	tracer trace.TracerProvider
}

// WithMetrics makes in count every message it ingests (agentbus_ingest_messages_total) and
// the webhook handlers built on it their requests. Call it before serving.
func (in *Ingestor) WithMetrics(m *metrics.Ingest) { in.metrics = m }

// SetTracer makes ingest record a span per message (and the webhook adapter one per request)
// with tp; without it, or with a no-op tp, nothing is recorded. Call it before serving.
func (in *Ingestor) SetTracer(tp trace.TracerProvider) { in.tracer = tp }

// Options configure New. Zero values pick the documented defaults; ingest reads no
// configuration file (pkg/app maps ai.trigger, ai.dispatcher and the bots' role lists here).
type Options struct {
	Trigger  Trigger
	Dispatch Dispatch
	// Bots maps "platform/bot" to its role lists; Trigger.Masters and .Trusted apply to every bot.
	Bots map[string]BotRoles
	// Log is the logger (default slog.Default()).
	Log *slog.Logger
}

// New returns an Ingestor publishing through js.
func New(js Publisher, o Options) *Ingestor {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	in := &Ingestor{js: js, inbox: plainInbox{js}, disp: NewDispatcher(o.Trigger, o.Dispatch),
		masters: o.Trigger.Masters, trusted: o.Trigger.Trusted, log: o.Log, roles: o.Bots}
	if full, ok := js.(jetstream.JetStream); ok {
		in.inbox = inbox.NewPublisher(full)
		in.maxPayload = func() int64 {
			if nc := full.Conn(); nc != nil {
				return nc.MaxPayload()
			}
			return 0
		}
	}
	return in
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
// message that reached IM_IN but not SESSION_IN is completed by the retry. It does so itself
// while the bus is briefly away (a leader election), until ctx ends: see ingestRetrying.
//
// With tracing on, the message gets a span "ingest <platform>", unless ctx has a recording span
// already (the webhook request's, which continues an inbound traceparent): then that span is
// the message's and gets the agentbus.platform attribute. Every event it publishes carries
// that span in events.HeaderSpanContext; the trace id is the event's envelope trace.
func (in *Ingestor) Ingest(ctx context.Context, m *events.IMMessage) (res Result, err error) {
	defer func() { in.count(m, res, err) }()
	if !tracing.Enabled(in.tracer) {
		return in.ingestRetrying(ctx, m) // off: not even the span's options are built
	}
	if cur := trace.SpanFromContext(ctx); cur.IsRecording() {
		// The webhook request's span: the publish is part of it, a span of its own would
		// add nothing an operator needs (and costs as much as any span).
		cur.SetAttributes(attribute.String("agentbus.platform", m.Platform))
		return in.ingest(ctx, m)
	}
	ctx, span := tracing.Start(ctx, in.tracer, "ingest "+m.Platform, "", "", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("agentbus.platform", m.Platform)))
	res, err = in.ingestRetrying(ctx, m)
	tracing.End(span, err)
	return res, err
}

// ingestRetrying runs ingest again, with exponential backoff, while it fails for the bus (not
// for the message): a NATS node lost makes the streams it led elect new leaders, 4-9 s in which
// publishes fail or go unanswered. It tries until ctx ends (a webhook request's deadline) or
// ingestRetryFor has passed, and not when the time left is shorter than the next wait; the
// last error is returned. A repeat is safe (see Ingest).
func (in *Ingestor) ingestRetrying(ctx context.Context, m *events.IMMessage) (Result, error) {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(ingestRetryFor))
	for try := 1; ; try++ {
		res, err := in.ingest(ctx, m)
		if err == nil || errors.Is(err, ErrTooLarge) || IsInvalid(err) || ctx.Err() != nil {
			return res, err
		}
		d := b.NextBackOff()
		if dl, ok := ctx.Deadline(); d == backoff.Stop || ok && time.Until(dl) < d {
			return res, err
		}
		level := slog.LevelDebug // one warning per message, not one per try
		if try == 1 {
			level = slog.LevelWarn
		}
		in.log.Log(ctx, level, "ingest failed; retrying", "message_id", m.MessageID, "platform", m.Platform, "try", try, "in", d.Round(time.Millisecond), "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
	}
}

// ingestRetryFor bounds ingestRetrying for a ctx without deadline: longer than a leader
// election.
const ingestRetryFor = 15 * time.Second

func (in *Ingestor) ingest(ctx context.Context, m *events.IMMessage) (res Result, err error) {
	m.MentionsBot = m.MentionsBot || m.Content.MentionsSelf(m.Bot)
	m.Sender.Roles = in.senderRoles(m)
	if err := in.storeInline(ctx, m); err != nil {
		return Result{}, err
	}
	// One sanitizer for every string of the message a user controls, whichever adapter made it:
	// no field (a file name, a caption, a face text, a URL, ...) carries a spoofed sender prefix
	// into IM_IN, the transcripts or the model. The turn worker applies it again to what it
	// reads, for events published by others.
	m.Content = identity.SanitizeSegments(m.Content)
	m.Sender.Name = identity.SanitizeText(m.Sender.Name)
	m.Scene.Name = identity.SanitizeText(m.Scene.Name)
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
	dec := in.disp.Dispatch(m)
	if err := in.fits(msg, m, dec, session, trace); err != nil {
		return Result{}, err
	}
	ack, err := in.js.PublishMsg(ctx, msg)
	if err != nil {
		return Result{}, fmt.Errorf("publish im.in %s: %w", m.MsgID(), err)
	}
	res = Result{Duplicate: ack.Duplicate, Decision: dec}
	// Built only when something is logged: most messages log nothing above debug.
	log := func() *slog.Logger { return in.log.With("session", session, "message_id", m.MessageID, "trace", trace) }
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

// inboxHeaderRoom is what the inbox publisher may add to an event's headers (the chain's
// expected-sequence headers) beyond what events.NewMsg sets.
const inboxHeaderRoom = 256

// fits returns an error wrapping ErrTooLarge, naming the limit, when the message or the inbox
// event it may cause is larger than the bus carries, so that nothing is published (a message in
// IM_IN whose inbox event the server refuses would never reach its session) and the sender is
// told it is permanent. The inbox event carries the message again with its text: sizes that
// leave room for that many bytes are accepted without building it.
func (in *Ingestor) fits(msg *nats.Msg, m *events.IMMessage, dec Decision, session, trace string) error {
	if in.maxPayload == nil {
		return nil
	}
	limit := in.maxPayload()
	if limit <= 0 {
		return nil
	}
	size := msgSize(msg)
	if size > limit {
		return tooLarge(size, limit)
	}
	if size+6*int64(len(dec.Text))+2*inboxHeaderRoom <= limit { // JSON escapes a byte into at most 6
		return nil
	}
	// The largest inbox event a message causes is its user_message (listen and command events
	// carry the message with less text).
	ev := events.New(events.UserMessage{Message: *m, Text: dec.Text, IMSeq: math.MaxUint64},
		events.WithSession(session), events.WithTrace(trace))
	ev.EventMeta().ID = stableID(m, 1)
	out, err := events.NewMsg(events.AgentInSubject(m.SessionKey()), ev)
	if err != nil {
		return err
	}
	if size := msgSize(out) + inboxHeaderRoom; size > limit {
		return tooLarge(size, limit)
	}
	return nil
}

func tooLarge(size, limit int64) error {
	return fmt.Errorf("%w: %d bytes on the bus, over its limit of %d bytes (the NATS server's max_payload); "+
		"send large media as inline base64 or a data: URL, which ingest moves to the media store, or by URL", ErrTooLarge, size, limit)
}

// msgSize is what a publish of m counts against max_payload: its data and its headers as the
// protocol writes them ("NATS/1.0\r\n", "Key: value\r\n" each, "\r\n").
func msgSize(m *nats.Msg) int64 {
	n := int64(len(m.Data))
	if len(m.Header) == 0 {
		return n
	}
	n += int64(len("NATS/1.0\r\n\r\n"))
	for k, vs := range m.Header {
		for _, v := range vs {
			n += int64(len(k) + len(": ") + len(v) + len("\r\n"))
		}
	}
	return n
}

// count records one message's outcome: rejected (invalid), error (the bus did not take it),
// duplicate (IM_IN had it already) or accepted.
func (in *Ingestor) count(m *events.IMMessage, res Result, err error) {
	if in.metrics == nil {
		return
	}
	outcome := metrics.IngestAccepted
	switch {
	case IsInvalid(err):
		outcome = metrics.IngestRejected
	case err != nil:
		outcome = metrics.IngestError
	case res.Duplicate:
		outcome = metrics.IngestDuplicate
	}
	in.metrics.Message(m.Platform, m.Bot, outcome)
}

// senderRoles computes m's sender roles (Roles) from ai.trigger's and the bot's lists without
// merging the lists per message.
func (in *Ingestor) senderRoles(m *events.IMMessage) []string {
	br := in.roles[m.Platform+"/"+m.Bot]
	id := m.Sender.ID
	roles := Roles(id, m.Sender.Roles, nil, nil)
	master := slices.Contains(in.masters, id) || slices.Contains(br.Masters, id) ||
		m.Platform == console.Platform // whoever reaches the bus is the operator: console users are masters
	if master || slices.Contains(in.trusted, id) || slices.Contains(br.Trusted, id) {
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

// deadLetter records a message ingest refused on dlq.ingest.<reason> with (the start of) its
// original body, as the IM adapters do (im.DeadLetter), so that it is not dropped silently.
func (in *Ingestor) deadLetter(ctx context.Context, where, reason string, cause error, raw []byte) error {
	return im.DeadLetter(ctx, in.js, where, reason, cause, raw)
}
