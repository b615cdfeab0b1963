package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sender delivers one outbound part to an IM platform. Egress picks the Sender by
// Outbound.Platform.
//
// Contract: Send returns the platform's id of the sent message once the platform has accepted
// it (a non-empty string; use out.OutID when the platform has none). An error that wraps
// ErrRejected, ErrUnknownBot or ErrNoSender (or events.ErrInvalid), or whose Permanent()
// method reports true (the pkg/im adapters' errors), is permanent: the part is
// dead-lettered and never retried. Any other error is transient and retried with backoff; an
// error implementing RetryAfterDelay() time.Duration (like *StatusError) pauses the platform
// for that long first. Send must honour ctx and be safe for concurrent use.
type Sender interface {
	Send(ctx context.Context, out events.Outbound) (platformMsgID string, err error)
}

// SenderFunc adapts a function to Sender.
type SenderFunc func(ctx context.Context, out events.Outbound) (string, error)

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, out events.Outbound) (string, error) {
	return f(ctx, out)
}

// Platform names of the built-in senders.
const (
	PlatformWebhook = "webhook"
	PlatformConsole = "console"
)

// WebhookSender POSTs parts to the callback URL of the webhook adapter's bots
// (im.webhook.bots[].callback), signed like inbound requests:
//
//	POST <callback>
//	Content-Type: application/json
//	X-Agentbus-Signature: sha256=<hex HMAC-SHA256 of the body with the bot's secret>
//	Idempotency-Key: <out id>
//
//	{"id":"<out id>","replyTo":"m1","bot":"b1","scene":{"type":"group","id":"g1"},"content":[...]}
//
// A 2xx answer means delivered; the platform message id is the "id" field of a JSON response
// body when there is one, otherwise the out id. 408, 429 and 5xx answers and connection errors
// are transient (Retry-After is honoured); any other status is permanent (ErrRejected).
//
// The body's "id" is the out id, stable across retries: egress sends each id at most once, but
// a crash between the receiver's 2xx and egress recording the delivery makes egress send the
// same id again after restart, so receivers should drop an id they have already seen.
type WebhookSender struct {
	client *http.Client
	bots   map[string]config.WebhookBot
	media  jetstream.ObjectStore // inlines media:// images; nil leaves them as references
}

// WithMedia makes the sender inline images stored in the media object store.
func (s *WebhookSender) WithMedia(store jetstream.ObjectStore) *WebhookSender {
	s.media = store
	return s
}

// NewWebhookSender returns a sender for bots. client nil means DefaultHTTPClient(16).
func NewWebhookSender(client *http.Client, bots []config.WebhookBot) *WebhookSender {
	if client == nil {
		client = DefaultHTTPClient(16)
	}
	m := make(map[string]config.WebhookBot, len(bots))
	for _, b := range bots {
		m[b.ID] = b
	}
	return &WebhookSender{client: client, bots: m}
}

// DefaultHTTPClient is the webhook sender's client: a 15 s timeout and up to perHost idle
// keep-alive connections per callback host (net/http keeps only 2 by default, so concurrent
// sends to one callback would otherwise open and close a connection per request).
func DefaultHTTPClient(perHost int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if perHost < 2 {
		perHost = 2
	}
	tr.MaxIdleConnsPerHost = perHost
	if tr.MaxIdleConns < perHost {
		tr.MaxIdleConns = perHost
	}
	return &http.Client{Timeout: 15 * time.Second, Transport: tr}
}

// maxResponse bounds how much of a callback's answer is read.
const maxResponse = 64 << 10

// Send implements Sender.
func (s *WebhookSender) Send(ctx context.Context, out events.Outbound) (string, error) {
	bot, ok := s.bots[out.Bot]
	if !ok {
		return "", fmt.Errorf("%w: webhook bot %q is not configured", ErrUnknownBot, out.Bot)
	}
	if bot.Callback == "" {
		return "", fmt.Errorf("%w: webhook bot %q has no callback URL", ErrUnknownBot, out.Bot)
	}
	content, err := inlineMedia(ctx, s.media, out.Content)
	if err != nil {
		return "", permanent(ReasonInvalid, err)
	}
	body, err := json.Marshal(webhook.Outbound{
		ID:      out.OutID,
		ReplyTo: out.ReplyTo,
		Bot:     out.Bot,
		Scene:   webhook.Scene{Type: out.Scene.Type, ID: out.Scene.ID},
		Content: content,
	})
	if err != nil {
		return "", permanent(ReasonInvalid, fmt.Errorf("encode webhook body: %w", err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bot.Callback, bytes.NewReader(body))
	if err != nil {
		// A callback URL that does not parse is a configuration error: retrying cannot help.
		return "", fmt.Errorf("%w: webhook bot %q: bad callback URL: %v", ErrUnknownBot, out.Bot, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(bot.Secret, body))
	req.Header.Set("Idempotency-Key", out.OutID)
	resp, err := s.post(ctx, req)
	if err != nil {
		return "", fmt.Errorf("webhook bot %q: post callback: %w", out.Bot, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", &StatusError{
			Platform:   PlatformWebhook,
			StatusCode: resp.StatusCode,
			RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
			Body:       snippet(data, 512),
		}
	}
	var ack struct {
		ID json.RawMessage `json:"id"`
	}
	if len(data) > 0 && json.Unmarshal(data, &ack) == nil && len(ack.ID) > 0 {
		var s string
		if json.Unmarshal(ack.ID, &s) == nil && s != "" {
			return s, nil
		}
		if n := strings.TrimSpace(string(ack.ID)); n != "" && n != "null" && n[0] != '"' {
			return n, nil // a numeric id
		}
	}
	return out.OutID, nil
}

// snippet returns the start of b as text, cut at a rune boundary.
func snippet(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
	}
	return strings.TrimSpace(string(b))
}

// ConsolePrefix is the core NATS subject prefix of console replies.
const ConsolePrefix = "console.out"

// ConsoleSubject is console.out.<bot>.<scene> (tokens encoded with events.EncodeToken): where
// the console platform's replies go. `agentbus chat` subscribes to it (or to
// console.out.<bot>.> for every scene of a bot).
func ConsoleSubject(bot, scene string) string {
	return ConsolePrefix + "." + events.EncodeToken(bot) + "." + events.EncodeToken(scene)
}

// ConsoleSender delivers console parts on core NATS: the message on ConsoleSubject(bot, scene)
// is the im.out event itself (JSON envelope + correlation headers, decode it with
// events.UnmarshalMsg into an events.Event[events.Outbound]). Core NATS has no receipt, so a
// part counts as delivered once published; the platform message id is the out id.
type ConsoleSender struct {
	nc *nats.Conn
}

// NewConsoleSender returns a sender publishing on nc.
func NewConsoleSender(nc *nats.Conn) *ConsoleSender { return &ConsoleSender{nc: nc} }

// Send implements Sender.
func (s *ConsoleSender) Send(ctx context.Context, out events.Outbound) (string, error) {
	return s.send(ctx, events.New(out))
}

func (s *ConsoleSender) send(_ context.Context, ev *events.Event[events.Outbound]) (string, error) {
	msg, err := events.NewMsg(ConsoleSubject(ev.Data.Bot, ev.Data.Scene.ID), ev)
	if err != nil {
		return "", permanent(ReasonInvalid, err)
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		return "", fmt.Errorf("console: publish: %w", err)
	}
	return ev.Data.OutID, nil
}

// eventSender is implemented by senders that want the whole event (correlation ids) rather
// than the payload alone.
type eventSender interface {
	sendEvent(ctx context.Context, ev *events.Event[events.Outbound]) (string, error)
}

func (s *ConsoleSender) sendEvent(ctx context.Context, ev *events.Event[events.Outbound]) (string, error) {
	return s.send(ctx, ev)
}

// post sends a callback request. The first attempt of a delivery is the delivery's "send"
// span itself (its traceparent goes to the receiver, its answer onto that span): a span of
// its own per message would add nothing an operator needs. A retried attempt gets a client
// span "POST" under it, so each retry shows with its answer.
func (s *WebhookSender) post(ctx context.Context, req *http.Request) (*http.Response, error) {
	if d, ok := ctx.Value(deliveryKey).(*delivery); ok && d.attempts <= 1 {
		tracing.InjectHTTP(req)
		resp, err := s.client.Do(req)
		tracing.RecordHTTP(ctx, resp, err)
		return resp, err
	}
	req, span := tracing.StartHTTPClient(req, http.MethodPost)
	resp, err := s.client.Do(req)
	tracing.EndHTTP(span, resp, err)
	return resp, err
}
