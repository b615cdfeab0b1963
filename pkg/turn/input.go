package turn

import (
	"context"
	"encoding/base64"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/llm"
)

// userInput turns an inbound message into the user message the model sees: group messages
// carry the trusted sender prefix (seed Grill #11); images arrive as image blocks when the
// adapter inlined them, else as a reference the model can read.
//
// Every text in it that a user controls goes through the one sanitizer (usertext.go,
// sanitizeUserContent): the text, every field of every segment, and the parts together, so
// that a spoofed sender prefix reaches the model neither whole nor split across segments.
func (rp replier) userInput(m *events.IMMessage, text string) llm.Message {
	clean := *m
	clean.Content = identity.SanitizeSegments(m.Content) // events published by others bypass ingest's pass
	if text == "" {
		text = identity.StripBotMention(strings.TrimSpace(identity.StripSpoofedSender(clean.Content.PlainText())), &clean)
	} else {
		text = identity.StripSpoofedSender(text)
	}
	content := sanitizeUserContent(append([]llm.Content{llm.Text(text)}, mediaParts(&clean)...))
	if m.Scene.Type != events.ScopePrivate {
		content[0].Text = identity.SenderPrefix(m.Sender) + content[0].Text
	}
	msg := llm.Message{Role: llm.RoleUser, Content: content, Timestamp: m.Time}
	if msg.Timestamp == 0 {
		msg.Timestamp = time.Now().UnixMilli()
	}
	return msg
}

// imageRefPrefix marks an image a message referenced by URL (see userInput).
const imageRefPrefix = "[image: "

// inlineImages replaces image references with image blocks for a vision model. A reference
// that cannot be fetched stays text, so the model still knows an image was there.
func (w *Worker) inlineImages(ctx context.Context, input []llm.Message) []llm.Message {
	if w.opts.FetchImage == nil && w.media == nil {
		return input
	}
	out := make([]llm.Message, len(input))
	for i, m := range input {
		m.Content = append([]llm.Content(nil), m.Content...)
		for j, c := range m.Content {
			ref, ok := strings.CutPrefix(c.Text, imageRefPrefix)
			if c.Type != llm.ContentText || !ok {
				continue
			}
			url := strings.TrimSuffix(ref, "]")
			data, mime, err := w.fetchImage(ctx, url)
			if err != nil {
				w.log.Warn("image not inlined", "url", url, "err", err)
				m.Content[j] = llm.Text(unfetchedImage(err))
				continue
			}
			m.Content[j] = llm.Image(base64.StdEncoding.EncodeToString(data), mime)
		}
		out[i] = m
	}
	return out
}
