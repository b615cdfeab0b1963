package ingest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// PlatformWebhook is the platform name of messages that arrive over the webhook adapter.
const PlatformWebhook = "webhook"

// maxBody caps an inbound request: room for a base64 photo (moved to the media store), far
// more than any chat text.
const maxBody = 8 << 20

// WebhookHandler serves POST /webhook/{bot}:
//
//	202 accepted (also for a repeated id, which is published once)
//	400 malformed JSON or missing fields
//	401 missing or wrong signature
//	404 unknown bot
//	413 body over 8 MiB
//	503 the bus did not take the message (the sender should retry)
//
// Nothing is published for a rejected request.
type WebhookHandler struct {
	in   *Ingestor
	bots map[string]config.WebhookBot
	log  *slog.Logger
}

// NewWebhookHandler returns the handler for the configured bots.
func NewWebhookHandler(in *Ingestor, bots []config.WebhookBot, log *slog.Logger) *WebhookHandler {
	m := make(map[string]config.WebhookBot, len(bots))
	for _, b := range bots {
		m[b.ID] = b
	}
	if log == nil {
		log = slog.Default()
	}
	return &WebhookHandler{in: in, bots: m, log: log}
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
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		httpError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	if len(body) > maxBody {
		httpError(w, http.StatusRequestEntityTooLarge, "body over 8 MiB")
		return
	}
	if err := webhook.Verify(bot.Secret, body, r.Header.Get(webhook.SignatureHeader)); err != nil {
		h.log.Warn("webhook rejected", "bot", botID, "reason", err.Error(), "remote", r.RemoteAddr)
		httpError(w, http.StatusUnauthorized, err.Error())
		return
	}
	in, err := webhook.ParseInbound(body)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	msg := ToIMMessage(botID, in)
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
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
