package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/tracing"
	wire "github.com/agentbus/agentbus/pkg/webhook"
)

// Sender POSTs parts to the callback URL of the webhook platform's bots
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
// are transient (Retry-After is honoured); any other status is permanent (im.ErrRejected). A
// bot that is not configured, has no callback or a callback URL that does not parse is
// im.ErrUnknownBot.
//
// The body's "id" is the out id, stable across retries: egress sends each id at most once, but
// a crash between the receiver's 2xx and egress recording the delivery makes egress send the
// same id again after restart, so receivers should drop an id they have already seen.
type Sender struct {
	client *http.Client
	bots   map[string]config.WebhookBot
	media  jetstream.ObjectStore // inlines media:// images; nil leaves them as references
}

// WithMedia makes the sender inline images stored in the media object store.
func (s *Sender) WithMedia(store jetstream.ObjectStore) *Sender {
	s.media = store
	return s
}

// NewSender returns a sender for bots. client nil means DefaultHTTPClient(16).
func NewSender(client *http.Client, bots []config.WebhookBot) *Sender {
	if client == nil {
		client = DefaultHTTPClient(16)
	}
	m := make(map[string]config.WebhookBot, len(bots))
	for _, b := range bots {
		m[b.ID] = b
	}
	return &Sender{client: client, bots: m}
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

// Send implements im.Sender.
func (s *Sender) Send(ctx context.Context, out events.Outbound) (string, error) {
	bot, ok := s.bots[out.Bot]
	if !ok {
		return "", fmt.Errorf("%w: webhook bot %q is not configured", im.ErrUnknownBot, out.Bot)
	}
	if bot.Callback == "" {
		return "", fmt.Errorf("%w: webhook bot %q has no callback URL", im.ErrUnknownBot, out.Bot)
	}
	content, err := inlineMedia(ctx, s.media, out.Content)
	if err != nil {
		return "", fmt.Errorf("%w: %w", events.ErrInvalid, err)
	}
	body, err := json.Marshal(wire.Outbound{
		ID:      out.OutID,
		ReplyTo: out.ReplyTo,
		Bot:     out.Bot,
		Scene:   wire.Scene{Type: out.Scene.Type, ID: out.Scene.ID},
		Content: content,
	})
	if err != nil {
		return "", fmt.Errorf("%w: encode webhook body: %w", events.ErrInvalid, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bot.Callback, bytes.NewReader(body))
	if err != nil {
		// A callback URL that does not parse is a configuration error: retrying cannot help.
		return "", fmt.Errorf("%w: webhook bot %q: bad callback URL: %v", im.ErrUnknownBot, out.Bot, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.SignatureHeader, wire.Sign(bot.Secret, body))
	req.Header.Set("Idempotency-Key", out.OutID)
	resp, err := s.post(ctx, req)
	if err != nil {
		return "", fmt.Errorf("webhook bot %q: post callback: %w", out.Bot, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", im.HTTPError(Platform, "callback", resp, []byte(strings.TrimSpace(string(data))))
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

// post sends a callback request. The first attempt of a delivery is the delivery's "send"
// span itself (its traceparent goes to the receiver, its answer onto that span): a span of
// its own per message would add nothing an operator needs. A retried attempt gets a client
// span "POST" under it, so each retry shows with its answer.
func (s *Sender) post(ctx context.Context, req *http.Request) (*http.Response, error) {
	if n := im.Attempt(ctx); n > 0 && n <= 1 {
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
