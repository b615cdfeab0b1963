package ingest

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentbus/agentbus/pkg/im/console"
	"log/slog"
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
	Duplicate bool     // the bus had already seen this platform message id (its first record was a duplicate)
	Decision  Decision // what the dispatcher decided
}

// Ingest dispatches m and stores it once (issue 40): inside its session inbox events on
// SESSION_IN when the dispatcher routes it to the session (user_message, listen, command,
// steer, follow_up carry the normalized message), otherwise on IM_IN (ignored, a refused
// command, /cancel). Both streams deduplicate on the platform message id for
// events.Spec.InboundDuplicates; events.InboundMessage finds the message in either. It fills
// m.MentionsBot and the sender's roles.
//
// It is safe to call again with the same message after a failure: every publish carries a
// Nats-Msg-Id derived from the platform message id, so JetStream drops the repeats and a
// message whose first inbox event was stored but not its second (dual mode) is completed by
// the retry. It does so itself
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
	dec := in.disp.Dispatch(m)
	res = Result{Decision: dec}
	// Built only when something is logged: most messages log nothing above debug.
	log := func() *slog.Logger { return in.log.With("session", session, "message_id", m.MessageID, "trace", trace) }

	// The plan: each route's inbox event, or its refusal. Everything is built and checked
	// against the bus's limit before anything is published, so a message is stored whole or
	// not at all (a message half stored whose other half the server refuses would never
	// reach its session).
	type step struct {
		msg    *nats.Msg // the inbox event; nil: refuse command
		refuse string
	}
	steps := make([]step, 0, len(dec.Routes))
	carried := false // an inbox event carries the message (events.InboundMessage)
	for i, r := range dec.Routes {
		var ev events.Any
		switch r {
		case RouteIgnore:
			continue
		case RouteListen:
			ev = events.New(events.Listen{Message: *m})
		case RouteAI:
			ev = events.New(events.UserMessage{Message: *m, Text: dec.Text})
		case RouteCommand:
			c := *dec.Command
			if !MayRun(c.Name, m.Scene.Type, m.Sender) {
				steps = append(steps, step{refuse: c.Name})
				continue
			}
			ev = commandEvent(c, m)
		}
		_, carries := events.InboundMessage(ev)
		carried = carried || carries
		meta := ev.EventMeta()
		meta.Session, meta.Trace = session, trace
		// One inbound message may cause two inbox events (dual mode); each needs its own
		// stable id. It is also the event's Nats-Msg-Id: SESSION_IN drops a repeat of the
		// platform message id within InboundDuplicates, as IM_IN does.
		meta.ID = stableID(m, i)
		out, err := events.NewMsg(events.AgentInSubject(sk), ev)
		if err != nil {
			return res, err
		}
		if err := in.fits(out, inboxHeaderRoom); err != nil {
			return res, err
		}
		tracing.InjectNATS(ctx, out.Header)
		steps = append(steps, step{msg: out})
	}
	// IM_IN holds only what no inbox event carries (issue 40): a message that reaches its
	// session is stored once, in SESSION_IN, where the archiver and every other reader of
	// inbound messages find it too (events.InboundMessage).
	first := true
	if !carried {
		imEv := events.New(*m, events.WithSession(session), events.WithTrace(trace))
		msg, err := events.NewMsg(events.IMInSubject(sk), imEv)
		if err != nil {
			return res, err
		}
		if err := in.fits(msg, 0); err != nil {
			return res, err
		}
		tracing.InjectNATS(ctx, msg.Header)
		ack, err := in.js.PublishMsg(ctx, msg)
		if err != nil {
			return res, fmt.Errorf("publish im.in %s: %w", m.MsgID(), err)
		}
		res.Duplicate, first = ack.Duplicate, false
	}
	for _, st := range steps {
		if st.msg == nil {
			if err := in.refuse(ctx, m, sk, st.refuse, trace); err != nil {
				return res, err
			}
			log().Info("refused command", "command", st.refuse, "sender", m.Sender.ID)
			continue
		}
		ack, err := in.inbox.Publish(ctx, st.msg)
		if err != nil {
			return res, fmt.Errorf("publish agent.in %s: %w", m.MsgID(), err)
		}
		if first {
			// The message's first record says whether it was seen before: a repeat within the
			// dedupe window (a retry, a replayed webhook) is dropped by the stream.
			res.Duplicate, first = ack.Duplicate, false
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

// fits returns an error wrapping ErrTooLarge, naming the limit, when msg (with room more
// header bytes, which the inbox publisher may add) is larger than the bus carries, so that
// nothing of the message is published and the sender is told it is permanent.
func (in *Ingestor) fits(msg *nats.Msg, room int64) error {
	if in.maxPayload == nil {
		return nil
	}
	limit := in.maxPayload()
	if limit <= 0 {
		return nil
	}
	if size := msgSize(msg) + room; size > limit {
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
