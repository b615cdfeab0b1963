package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	slackapi "github.com/slack-go/slack"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Sender is the egress half of the Slack adapter (egress's Sender contract for platform
// "slack"). One outbound part becomes one or more Slack messages: its text cut at the chunk
// limit (chat.postMessage, &, < and > escaped so model text cannot forge mentions or links),
// then each media segment uploaded as a file. Every message goes into the thread of the
// message the part answers (see the package doc). Each message is recorded in the ledger, so
// a retried part resumes after the messages already sent. When a streaming preview of the
// turn is showing, part 0 replaces it (chat.update) instead of posting a new message.
type Sender struct {
	bots   map[string]*webBot
	media  *im.Media
	ledger *im.Ledger
	nc     *nats.Conn
}

type webBot struct {
	bot config.SlackBot
	api *slackapi.Client
}

// NewSender returns the sender for bots.
func NewSender(bots []config.SlackBot, hc *http.Client, media *im.Media, ledger *im.Ledger, nc *nats.Conn) (*Sender, error) {
	s := &Sender{bots: map[string]*webBot{}, media: media, ledger: ledger, nc: nc}
	for _, b := range bots {
		if err := Validate(b); err != nil {
			return nil, err
		}
		s.bots[b.ID] = &webBot{bot: b, api: newAPI(b, hc)}
	}
	return s, nil
}

type one struct {
	text  string // Slack text, already escaped
	media events.Segment
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// plan cuts a part into Slack messages.
func plan(content events.Segments, limit int) []one {
	flat := make(events.Segments, 0, len(content))
	for _, s := range content {
		switch {
		case s.Type == events.SegAt:
			id := s.MentionID()
			if id == "" {
				continue
			}
			s = events.TextSeg("\x00" + id + "\x01 ") // a mention placeholder, not escaped
		case s.Type != events.SegText:
			flat = append(flat, s)
			continue
		}
		if n := len(flat); n > 0 && flat[n-1].Type == events.SegText {
			flat[n-1] = events.TextSeg(flat[n-1].Str("text") + s.Str("text"))
			continue
		}
		flat = append(flat, s)
	}
	var out []one
	for _, chunk := range im.Chunks(flat, limit) {
		var text strings.Builder
		var media []events.Segment
		for _, s := range chunk {
			switch {
			case s.Type == events.SegText:
				text.WriteString(s.Str("text"))
			case s.IsMedia() && s.Type != events.SegFace && s.Type != events.SegEmoji && s.Type != events.SegSticker:
				media = append(media, s)
			}
		}
		if t := strings.TrimSpace(text.String()); t != "" {
			t = escaper.Replace(t)
			t = strings.NewReplacer("\x00", "<@", "\x01", ">").Replace(t)
			out = append(out, one{text: t})
		}
		for _, m := range media {
			out = append(out, one{media: m})
		}
	}
	return out
}

// threadFor is the thread_ts of a reply to replyTo in a scene of scope.
func threadFor(scope, replyTo string) string {
	if replyTo == "" {
		return ""
	}
	ts, thread := splitMessageID(replyTo)
	if thread != "" {
		return thread
	}
	if scope == events.ScopePrivate {
		return ""
	}
	return ts
}

// Send implements egress's Sender.
func (s *Sender) Send(ctx context.Context, out events.Outbound) (string, error) {
	b, ok := s.bots[out.Bot]
	if !ok {
		return "", im.Permanent(fmt.Errorf("%w: slack bot %q is not configured", im.ErrUnknownBot, out.Bot))
	}
	channel := out.Scene.ID
	if channel == "" {
		return "", im.Permanent(fmt.Errorf("slack: outbound %s has no channel", out.OutID))
	}
	msgs := plan(out.Content, chunkLimit(b.bot))
	if len(msgs) == 0 {
		return out.OutID, nil
	}
	thread := threadFor(out.Scene.Type, out.ReplyTo)
	preview := ""
	if out.Part == 0 && out.Turn != "" && s.nc != nil && previewMode(b.bot) != "off" {
		preview = s.takePreview(ctx, out.Bot, out.Turn)
	}
	first := ""
	for k, m := range msgs {
		key := im.ChunkKey(out.OutID, k)
		if id, ok := s.ledger.Sent(ctx, key); ok {
			if k == 0 {
				first = id
			}
			continue
		}
		var id string
		var err error
		switch {
		case k == 0 && preview != "" && m.text != "":
			id, err = s.update(ctx, b, channel, preview, m.text, thread)
			if im.IsPermanent(err) { // the preview is gone: post anew
				id, err = s.post(ctx, b, channel, m.text, thread)
			}
		case m.text != "":
			s.dropPreview(ctx, b, channel, k, &preview)
			id, err = s.post(ctx, b, channel, m.text, thread)
		default:
			s.dropPreview(ctx, b, channel, k, &preview)
			id, err = s.upload(ctx, b, channel, m.media, thread)
		}
		if err != nil {
			return "", err
		}
		if err := s.ledger.Record(ctx, key, id); err != nil && k < len(msgs)-1 {
			return "", err
		}
		if k == 0 {
			first = id
		}
	}
	return first, nil
}

func (s *Sender) dropPreview(ctx context.Context, b *webBot, channel string, k int, preview *string) {
	if k != 0 || *preview == "" {
		return
	}
	ts, _ := splitMessageID(*preview)
	_, _, _ = b.api.DeleteMessageContext(ctx, channel, ts) // a preview left behind is cosmetic
	*preview = ""
}

func (s *Sender) post(ctx context.Context, b *webBot, channel, text, thread string) (string, error) {
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(text, false), slackapi.MsgOptionDisableLinkUnfurl()}
	if thread != "" {
		opts = append(opts, slackapi.MsgOptionTS(thread))
	}
	ch, ts, err := b.api.PostMessageContext(ctx, channel, opts...)
	if err != nil {
		return "", classify("chat.postMessage", err)
	}
	if ch == "" {
		ch = channel
	}
	return MessageID(ch, ts, thread), nil
}

func (s *Sender) update(ctx context.Context, b *webBot, channel, preview, text, thread string) (string, error) {
	ts, _ := splitMessageID(preview)
	if _, _, _, err := b.api.UpdateMessageContext(ctx, channel, ts, slackapi.MsgOptionText(text, false)); err != nil {
		return "", classify("chat.update", err)
	}
	return MessageID(channel, ts, thread), nil
}

// upload sends one media segment as a file (files.getUploadURLExternal, the upload, then
// files.completeUploadExternal into the channel and thread).
func (s *Sender) upload(ctx context.Context, b *webBot, channel string, seg events.Segment, thread string) (string, error) {
	ref := seg.MediaRef()
	if obj := seg.Str("object"); obj != "" && !strings.HasPrefix(ref, im.MediaScheme) {
		ref = im.MediaScheme + obj
	}
	name := seg.Str("name")
	var data []byte
	var ct string
	switch {
	case strings.HasPrefix(ref, im.MediaScheme):
		var err error
		if data, ct, _, err = s.media.Load(ctx, ref); err != nil {
			return "", im.Permanent(fmt.Errorf("slack: %s segment: %w", seg.Type, err))
		}
		if name == "" {
			name = strings.ReplaceAll(strings.TrimPrefix(ref, im.MediaScheme), "/", "_")
		}
	case strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://"):
		// Slack unfurls a link to media by itself.
		return s.post(ctx, b, channel, escaper.Replace(ref), thread)
	default:
		return "", im.Permanent(fmt.Errorf("slack: %s segment has no url or object", seg.Type))
	}
	if len(data) == 0 {
		return "", im.Permanent(fmt.Errorf("slack: %s segment is empty", seg.Type))
	}
	if path.Ext(name) == "" {
		name += extFor(ct)
	}
	f, err := b.api.UploadFileContext(ctx, slackapi.UploadFileParameters{Reader: bytes.NewReader(data), FileSize: len(data),
		Filename: name, Title: name, Channel: channel, ThreadTimestamp: thread})
	if err != nil {
		return "", classify("files.upload", err)
	}
	return f.ID, nil
}

func extFor(ct string) string {
	switch {
	case strings.HasPrefix(ct, "image/png"):
		return ".png"
	case strings.HasPrefix(ct, "image/jpeg"):
		return ".jpg"
	case strings.HasPrefix(ct, "image/gif"):
		return ".gif"
	case strings.HasPrefix(ct, "audio/ogg"):
		return ".ogg"
	case strings.HasPrefix(ct, "video/mp4"):
		return ".mp4"
	}
	return ".bin"
}

// takePreview asks the previewer for the turn's preview message id and makes it stop
// updating it; "" when there is none.
func (s *Sender) takePreview(ctx context.Context, bot, turn string) string {
	b, _ := json.Marshal(takeRequest{Turn: turn})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := s.nc.RequestWithContext(rctx, PreviewSubject(bot), b)
	if err != nil {
		return ""
	}
	var ans takeAnswer
	if json.Unmarshal(msg.Data, &ans) != nil {
		return ""
	}
	return ans.MessageID
}
