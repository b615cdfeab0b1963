package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// PlatformWebhook is the platform name of messages that arrive over the webhook adapter.
const PlatformWebhook = "webhook"

// SeenStore remembers the ids of accepted webhook requests, so that a replayed signed body is
// refused after the streams' dedupe window too. Implementations must be safe for concurrent use
// and durable across restarts; KVSeen is the one agentbus uses.
type SeenStore interface {
	// Seen reports whether key was remembered and has not expired.
	Seen(ctx context.Context, key string) (bool, error)
	// Remember stores key for ttl. Remembering a key twice is not an error.
	Remember(ctx context.Context, key string, ttl time.Duration) error
}

// KVSeen is a SeenStore on KV webhook_seen (events.Spec.WebhookSeenKV): one empty value per
// key, each with its own TTL.
type KVSeen struct{ KV jetstream.KeyValue }

// Seen implements SeenStore.
func (s KVSeen) Seen(ctx context.Context, key string) (bool, error) {
	_, err := s.KV.Get(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	}
	return false, fmt.Errorf("ingest: webhook_seen get: %w", err)
}

// Remember implements SeenStore.
func (s KVSeen) Remember(ctx context.Context, key string, ttl time.Duration) error {
	_, err := s.KV.Create(ctx, key, nil, jetstream.KeyTTL(ttl))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("ingest: webhook_seen create: %w", err)
	}
	return nil
}

// WebhookHandler serves POST /webhook/{bot}:
//
//	202 accepted (also for a repeated id, which is published once: {"duplicate":true})
//	400 malformed JSON or missing fields
//	401 missing or wrong signature, or a signed timestamp outside the tolerance window
//	404 unknown bot
//	413 body over im.webhook.maxBodyBytes
//	429 over the bot's or the sender's rate limit (Retry-After says when to retry)
//	503 the bus did not take the message, or too many requests at once (the sender should retry)
//
// Two signature schemes are accepted, keyed with the bot's secret: Standard Webhooks
// (webhook-id, webhook-timestamp, webhook-signature over id.timestamp.body) and
// X-Agentbus-Signature (HMAC-SHA256 of the body, whose "time" field, Unix ms, is then the
// signed timestamp and required). A request id accepted once is refused as a duplicate for
// twice the tolerance window (KV webhook_seen), and later by its timestamp.
//
// Nothing is published for a rejected request.
type WebhookHandler struct {
	in        *Ingestor
	bots      map[string]config.WebhookBot
	cfg       config.Webhook
	tolerance time.Duration
	seen      SeenStore
	perBot    *keyedLimiter
	perSender *keyedLimiter
	inFlight  chan struct{}
	log       *slog.Logger
	now       func() time.Time
}

// NewWebhookHandler returns the handler for cfg's bots and limits (zero limits take their
// defaults, config.Webhook.ApplyDefaults). seen may be nil: then replays are refused only
// within the streams' dedupe window and by the timestamp check.
func NewWebhookHandler(in *Ingestor, cfg config.Webhook, seen SeenStore, log *slog.Logger) *WebhookHandler {
	cfg.ApplyDefaults()
	m := make(map[string]config.WebhookBot, len(cfg.Bots))
	for _, b := range cfg.Bots {
		m[b.ID] = b
	}
	if log == nil {
		log = slog.Default()
	}
	rl := cfg.RateLimit
	return &WebhookHandler{
		in: in, bots: m, cfg: cfg, seen: seen, log: log, now: time.Now,
		tolerance: time.Duration(cfg.ToleranceSeconds) * time.Second,
		perBot:    newKeyedLimiter(rl.PerBot.PerSecond, rl.PerBot.Burst, len(m)+1),
		perSender: newKeyedLimiter(rl.PerSender.PerSecond, rl.PerSender.Burst, rl.MaxSenders),
		inFlight:  make(chan struct{}, cfg.MaxInFlight),
	}
}

// Routes registers the handler on mux.
func (h *WebhookHandler) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhook/{bot}", h.serve)
}

func (h *WebhookHandler) serve(w http.ResponseWriter, r *http.Request) {
	botID := r.PathValue("bot")
	bot, ok := h.bots[botID]
	if !ok {
		httpError(w, http.StatusNotFound, "unknown bot "+botID)
		return
	}
	select {
	case h.inFlight <- struct{}{}:
		defer func() { <-h.inFlight }()
	default:
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, "too many requests at once, retry later")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.cfg.MaxBodyBytes+1))
	if err != nil {
		httpError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	if int64(len(body)) > h.cfg.MaxBodyBytes {
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", h.cfg.MaxBodyBytes))
		return
	}
	now := h.now()
	standard := webhook.IsStandard(r.Header)
	if standard {
		_, _, err = webhook.VerifyStandard(bot.Secret, body, r.Header, now, h.tolerance)
	} else {
		err = webhook.Verify(bot.Secret, body, r.Header.Get(webhook.SignatureHeader))
	}
	if err != nil {
		h.log.Warn("webhook rejected", "bot", botID, "reason", err.Error(), "remote", r.RemoteAddr)
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
		if err := webhook.CheckTime(time.UnixMilli(in.Time), now, h.tolerance); err != nil {
			h.log.Warn("webhook rejected", "bot", botID, "reason", err.Error(), "remote", r.RemoteAddr)
			httpError(w, http.StatusUnauthorized, err.Error())
			return
		}
	}
	// A request refused by one limit costs nothing of the other.
	refund, d, ok := h.perSender.take(botID+"\x00"+in.Sender.ID, now)
	if !ok {
		tooMany(w, d, "sender "+in.Sender.ID+" is over its rate limit")
		return
	}
	if d, ok := h.perBot.allow(botID, now); !ok {
		refund()
		tooMany(w, d, "bot "+botID+" is over its rate limit")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	key := seenKey(botID, in.ID)
	if h.seen != nil {
		seen, err := h.seen.Seen(ctx, key)
		if err != nil {
			h.log.Error("webhook replay check failed", "bot", botID, "msg", in.ID, "err", err)
			httpError(w, http.StatusServiceUnavailable, "not accepted, retry later")
			return
		}
		if seen {
			writeAccepted(w, Result{Duplicate: true})
			return
		}
	}
	msg := ToIMMessage(botID, in)
	res, err := h.in.Ingest(ctx, msg)
	switch {
	case IsInvalid(err):
		httpError(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		h.log.Error("webhook ingest failed", "bot", botID, "msg", in.ID, "err", err)
		httpError(w, http.StatusServiceUnavailable, "not accepted, retry later")
		return
	}
	if h.seen != nil {
		// Both sides of the window: a timestamp up to tolerance ahead stays valid for 2×tolerance.
		if err := h.seen.Remember(ctx, key, 2*h.tolerance+time.Minute); err != nil {
			h.log.Warn("webhook replay record failed", "bot", botID, "msg", in.ID, "err", err)
		}
	}
	writeAccepted(w, res)
}

// seenKey is the webhook_seen key of a message: a hash, since ids may hold any character.
func seenKey(bot, id string) string {
	sum := sha256.Sum256([]byte(bot + "\x00" + id))
	return hex.EncodeToString(sum[:16])
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
