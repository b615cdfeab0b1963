package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	imwebhook "github.com/agentbus/agentbus/pkg/im/webhook"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// PlatformWebhook is the platform name of messages that arrive over the webhook adapter (its
// sender and registration are pkg/im/webhook's).
const PlatformWebhook = imwebhook.Platform

// Defaults of WebhookOptions (docs/configuration.md, im.webhook).
const (
	DefaultWebhookTolerance   = 5 * time.Minute
	DefaultMaxBodyBytes       = 8 << 20 // room for a base64 photo, which ingest moves to the media store
	DefaultMaxInFlight        = 1024    // a count bound only: memory is bounded by MaxInFlightBytes
	DefaultMaxInFlightBytes   = 64 << 20
	DefaultMaxSenders         = 10000
	DefaultPerBotPerSecond    = 100
	DefaultPerBotBurst        = 200
	DefaultPerSenderPerSecond = 5
	DefaultPerSenderBurst     = 20
)

// WebhookOptions configure the webhook adapter (NewWebhookHandler). Zero values pick the
// defaults named beside each field; pkg/app maps the im.webhook block onto them.
type WebhookOptions struct {
	// Secrets maps each bot id served on /webhook/{bot} to its HMAC key. A bot with an empty
	// key is refused (401): an empty key is one anyone has.
	Secrets map[string]string
	// Tolerance is how far a request's signed timestamp may be from this clock, either way
	// (default 5 min). Replays are refused while the timestamp is valid by the dedupe window
	// of IM_IN and SESSION_IN (at least twice this, CheckReplayWindow), and after it by the
	// timestamp.
	Tolerance time.Duration
	// MaxBodyBytes caps one request body (default 8 MiB). MaxInFlightBytes caps the bytes of
	// the requests served at once, each counted as its body plus 16 KiB (default 64 MiB, and
	// at least MaxBodyBytes); MaxInFlight caps their number (default 1024). A request over
	// either gets 503 + Retry-After; together they bound the memory a flood takes.
	MaxBodyBytes     int64
	MaxInFlight      int
	MaxInFlightBytes int64
	// PerBot and PerSender limit accepted requests (defaults 100/s burst 200, and 5/s burst
	// 20); over them: 429 + Retry-After. A negative PerSecond turns a limit off.
	PerBot, PerSender RateLimit
	// MaxSenders bounds how many per-sender buckets are kept (default 10000); idle ones are
	// evicted first, and when none is idle new senders get 429 until one is.
	MaxSenders int
}

// RateLimit is a token bucket: PerSecond tokens a second, at most Burst at once. Zero fields
// take the limit's default; PerSecond < 0 turns the limit off.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// setDefaults fills every zero field of o with its default.
func (o *WebhookOptions) setDefaults() {
	if o.Tolerance == 0 {
		o.Tolerance = DefaultWebhookTolerance
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxInFlightBytes == 0 {
		o.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if o.MaxInFlightBytes > 0 && o.MaxInFlightBytes < o.MaxBodyBytes {
		o.MaxInFlightBytes = o.MaxBodyBytes // one request of the largest size always fits
	}
	rate := func(r *RateLimit, perSecond float64, burst int) {
		if r.PerSecond == 0 {
			r.PerSecond = perSecond
		}
		if r.Burst == 0 {
			r.Burst = burst
		}
	}
	rate(&o.PerBot, DefaultPerBotPerSecond, DefaultPerBotBurst)
	rate(&o.PerSender, DefaultPerSenderPerSecond, DefaultPerSenderBurst)
	if o.MaxSenders == 0 {
		o.MaxSenders = DefaultMaxSenders
	}
}

// CheckReplayWindow returns an error wrapping ErrReplayWindow when the dedupe window of IM_IN
// or SESSION_IN, as provisioned on the server, is shorter than twice the webhook's tolerance
// (WebhookOptions.Tolerance; 0 means its default, 5 min): the webhook adapter refuses a
// replayed signed request only by those windows (IM_IN drops the repeated platform message id,
// SESSION_IN the repeated inbox event), and a request stays valid for 2 × tolerance. The
// ingest role calls it at start, which also catches streams an administrator provisioned with
// other settings.
func CheckReplayWindow(ctx context.Context, js jetstream.StreamManager, tolerance time.Duration) error {
	if tolerance == 0 {
		tolerance = DefaultWebhookTolerance
	}
	need := 2 * tolerance
	for _, name := range []string{events.StreamIMIn, events.StreamSessionIn} {
		st, err := natsutil.Stream(ctx, js, name)
		if err != nil {
			return fmt.Errorf("ingest: replay window: open stream %s: %w", name, err)
		}
		if d := st.CachedInfo().Config.Duplicates; d < need {
			return fmt.Errorf("%w: stream %s dedupes for %s, im.webhook.toleranceSeconds %d needs at least %s (set nats.inboundDuplicatesMs, and a max age at least as long)",
				ErrReplayWindow, name, d, int64(tolerance/time.Second), need)
		}
	}
	return nil
}

// WebhookHandler serves POST /webhook/{bot}:
//
//	202 accepted (also for a repeated id, which is published once: {"duplicate":true})
//	400 malformed JSON or missing fields
//	401 missing or wrong signature, or a signed timestamp outside the tolerance window
//	404 unknown bot
//	413 body over im.webhook.maxBodyBytes, or a message larger than the bus carries (the NATS
//	    server's max_payload, stated in the answer; inline media goes to the media store and
//	    does not count); the message is dead-lettered
//	429 over the bot's or the sender's rate limit (Retry-After says when to retry)
//	503 the bus did not take the message, or too many requests or bytes in flight (im.webhook.
//	    maxInFlight, maxInFlightBytes; Retry-After: 1, the sender should retry)
//
// Refusals (401, 429, 503) are logged at most once a second per reason and bot, with the count
// of the lines held back, and counted in agentbus_ingest_messages_total (rate_limited for 429
// and a 503 for load, error for a 503 of the bus, rejected for the others).
//
// Two signature schemes are accepted, keyed with the bot's secret: Standard Webhooks
// (webhook-id, webhook-timestamp, webhook-signature over id.timestamp.body) and
// X-Agentbus-Signature (HMAC-SHA256 of the body, whose "time" field, Unix ms, is then the
// signed timestamp and required). A request id accepted once is answered as a duplicate, with
// nothing published again, for the dedupe window of IM_IN and SESSION_IN (at least twice the
// tolerance, CheckReplayWindow), and refused later by its timestamp. A repeat of a request that
// failed half-way (one of a message's two inbox events stored, dual mode) completes it: every
// inbox event carries a stable id, so only what is missing is stored.
//
// Nothing is published for a rejected request.
type WebhookHandler struct {
	in        *Ingestor
	secrets   map[string]string // bot id → HMAC key
	o         WebhookOptions
	perBot    *keyedLimiter
	perSender *keyedLimiter
	flight    *inFlight    // requests and bytes being served (maxInFlight, maxInFlightBytes)
	logs      *logThrottle // refusals are logged at most once a second per reason and bot
	log       *slog.Logger
	now       func() time.Time
}

// NewWebhookHandler returns the handler for o's bots and limits (zero values take their
// defaults). Replays are refused by the streams' dedupe window and the timestamp check: check
// the window with CheckReplayWindow before serving. The handler starts nothing: the
// composition root serves it (Routes) and stops its HTTP server; the ingest role has no
// lifecycle of its own.
func NewWebhookHandler(in *Ingestor, o WebhookOptions, log *slog.Logger) *WebhookHandler {
	o.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	return &WebhookHandler{
		in: in, secrets: o.Secrets, o: o, log: log, now: time.Now,
		perBot:    newKeyedLimiter(o.PerBot.PerSecond, o.PerBot.Burst, len(o.Secrets)+1),
		perSender: newKeyedLimiter(o.PerSender.PerSecond, o.PerSender.Burst, o.MaxSenders),
		flight:    newInFlight(o.MaxInFlight, o.MaxInFlightBytes),
		logs:      newLogThrottle(time.Second),
	}
}

// Routes registers the handler on mux.
func (h *WebhookHandler) Routes(mux *http.ServeMux) {
	// With tracing on, each request is a server span; an inbound W3C traceparent continues the
	// caller's trace (and lends its trace id to the message even with tracing off).
	const route = "POST /webhook/{bot}"
	mux.Handle(route, tracing.Handler(h.in.tracer, route, http.HandlerFunc(h.serve)))
}

func (h *WebhookHandler) serve(rw http.ResponseWriter, r *http.Request) {
	w := &statusWriter{ResponseWriter: rw}
	botID := r.PathValue("bot")
	// Counted once answered: the request by its status class, and a request refused before
	// Ingest (which counts its own outcomes) as rejected or rate_limited for its bot.
	defer func() {
		m := h.in.metrics
		m.WebhookRequest(w.code)
		if _, known := h.secrets[botID]; !known || w.ingested {
			return
		}
		switch {
		case w.code == http.StatusTooManyRequests || w.code == http.StatusServiceUnavailable:
			m.Message(PlatformWebhook, botID, metrics.IngestRateLimited)
		case w.code >= 400:
			m.Message(PlatformWebhook, botID, metrics.IngestRejected)
		}
	}()
	secret, ok := h.secrets[botID]
	if !ok {
		httpError(w, http.StatusNotFound, "unknown bot "+botID)
		return
	}
	if secret == "" {
		// Fail closed (config validation requires a secret): an empty HMAC key is one anyone has.
		httpError(w, http.StatusUnauthorized, "bot "+botID+" has no secret configured")
		return
	}
	// Memory is bounded by the bytes in flight, not by a small count of requests: a request
	// reserves its Content-Length (or a first slice of a body of unknown length, growing as it
	// is read) plus requestOverhead, and is refused 503 only when the reservation does not fit.
	if r.ContentLength > h.o.MaxBodyBytes {
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", h.o.MaxBodyBytes))
		return
	}
	reserve := int64(firstRead)
	if r.ContentLength >= 0 {
		reserve = r.ContentLength + 1 // room for the read that finds the end
	}
	reserve += requestOverhead
	if !h.flight.acquire(reserve) {
		h.refuseBusy(w, r, botID)
		return
	}
	body, reserved, err := readBody(r.Body, h.o.MaxBodyBytes, reserve, h.flight)
	defer func() { h.flight.release(reserved) }()
	switch {
	case errors.Is(err, errNoRoom):
		h.refuseBusy(w, r, botID)
		return
	case errors.Is(err, errBodyTooLarge):
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", h.o.MaxBodyBytes))
		return
	case err != nil:
		httpError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	now := h.now()
	standard := webhook.IsStandard(r.Header)
	if standard {
		_, _, err = webhook.VerifyStandard(secret, body, r.Header, now, h.o.Tolerance)
	} else {
		err = webhook.Verify(secret, body, r.Header.Get(webhook.SignatureHeader))
	}
	if err != nil {
		h.logRefusal(slog.LevelWarn, "webhook rejected", botID, "status", http.StatusUnauthorized, "reason", err.Error(), "remote", r.RemoteAddr)
		httpError(w, http.StatusUnauthorized, err.Error())
		return
	}
	in, err := webhook.ParseInbound(body)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !standard {
		// The body is what X-Agentbus-Signature signs, so its time is the signed timestamp.
		if in.Time == 0 {
			httpError(w, http.StatusUnauthorized, "time (Unix ms) is required with "+webhook.SignatureHeader+": it is the signed timestamp")
			return
		}
		if err := webhook.CheckTime(time.UnixMilli(in.Time), now, h.o.Tolerance); err != nil {
			h.logRefusal(slog.LevelWarn, "webhook rejected", botID, "status", http.StatusUnauthorized, "reason", err.Error(), "remote", r.RemoteAddr)
			httpError(w, http.StatusUnauthorized, err.Error())
			return
		}
	}
	// A request refused by one limit costs nothing of the other.
	refund, d, ok := h.perSender.take(botID+"\x00"+in.Sender.ID, now)
	if !ok {
		h.logRefusal(slog.LevelWarn, "webhook refused: sender over its rate limit", botID,
			"status", http.StatusTooManyRequests, "sender", in.Sender.ID, "retry_after", d.Round(time.Millisecond))
		tooMany(w, d, "sender "+in.Sender.ID+" is over its rate limit")
		return
	}
	if d, ok := h.perBot.allow(botID, now); !ok {
		refund()
		h.logRefusal(slog.LevelWarn, "webhook refused: bot over its rate limit", botID,
			"status", http.StatusTooManyRequests, "retry_after", d.Round(time.Millisecond))
		tooMany(w, d, "bot "+botID+" is over its rate limit")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	msg := ToIMMessage(botID, in)
	res, err := h.in.Ingest(ctx, msg)
	w.ingested = true
	switch {
	case errors.Is(err, ErrTooLarge):
		// Permanent: the sender is told the limit, and the operator finds it in the dead letters.
		h.log.Warn("webhook message too large for the bus", "bot", botID, "msg", in.ID, "err", err)
		if derr := h.in.deadLetter(ctx, PlatformWebhook+"/"+botID, events.DLQInvalid, err, body); derr != nil {
			h.log.Error("webhook dead letter", "bot", botID, "msg", in.ID, "err", derr)
		}
		httpError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	case IsInvalid(err):
		httpError(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		h.logRefusal(slog.LevelError, "webhook ingest failed", botID, "status", http.StatusServiceUnavailable, "message_id", in.ID, "err", err)
		w.Header().Set("Retry-After", "1") // a leader election is seconds; every 503 says when
		httpError(w, http.StatusServiceUnavailable, "not accepted, retry later")
		return
	}
	writeAccepted(w, res)
}

// refuseBusy answers 503 + Retry-After to a request the bytes or requests in flight leave no
// room for.
func (h *WebhookHandler) refuseBusy(w http.ResponseWriter, r *http.Request, botID string) {
	n, bytes := h.flight.load()
	w.Header().Set("Retry-After", "1")
	h.logRefusal(slog.LevelWarn, "webhook refused: too many requests at once", botID, "status", http.StatusServiceUnavailable,
		"in_flight", n, "in_flight_bytes", bytes, "content_length", r.ContentLength, "remote", r.RemoteAddr)
	httpError(w, http.StatusServiceUnavailable, "too many requests at once, retry later")
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	code     int
	ingested bool // Ingest ran and counted the message's outcome itself
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func tooMany(w http.ResponseWriter, d time.Duration, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter(d)))
	httpError(w, http.StatusTooManyRequests, msg)
}

func writeAccepted(w http.ResponseWriter, res Result) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(acceptedBody(res))
}

// acceptedBody is the 202 body, {"accepted":true,"duplicate":<bool>,"route":[<names>]} and a
// newline, written without a map and reflection (route names are plain ASCII words).
func acceptedBody(res Result) []byte {
	b := make([]byte, 0, 64)
	b = append(b, `{"accepted":true,"duplicate":`...)
	b = strconv.AppendBool(b, res.Duplicate)
	b = append(b, `,"route":[`...)
	for i, r := range res.Decision.Routes {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, r.String()...)
		b = append(b, '"')
	}
	return append(b, "]}\n"...)
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// ToIMMessage normalizes a webhook body into the bus's inbound message.
func ToIMMessage(bot string, in *webhook.Inbound) *events.IMMessage {
	t := in.Time
	if t == 0 {
		t = time.Now().UnixMilli()
	}
	return &events.IMMessage{
		Platform: PlatformWebhook, Bot: bot, MessageID: in.ID,
		Scene:   events.Scene{Type: in.Scene.Type, ID: in.Scene.ID},
		Sender:  events.Sender{ID: in.Sender.ID, Name: in.Sender.Name, Roles: in.Sender.Roles},
		Content: events.Segments(in.Content), Time: t,
	}
}
