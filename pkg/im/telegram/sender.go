package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Sender is the egress half of the Telegram adapter (egress's Sender contract for platform
// "telegram"). One outbound part becomes one or more Telegram messages: its text cut at the
// chunk limit (sendMessage, HTML parse mode), then each media segment (sendPhoto,
// sendVoice, sendAudio, sendVideo, sendDocument). The first message answers the message the
// part replies to. Each message is recorded in the ledger, so a retried part resumes after
// the messages already sent. When a streaming preview of the turn is showing, part 0
// replaces it (editMessageText) instead of sending a new message.
type Sender struct {
	bots   map[string]*client
	media  *im.Media
	ledger *im.Ledger
	nc     *nats.Conn // asks the previewer to hand over a turn's preview; nil = no previews
}

// NewSender returns the sender for bots.
func NewSender(bots []config.TelegramBot, hc *http.Client, media *im.Media, ledger *im.Ledger, nc *nats.Conn) (*Sender, error) {
	s := &Sender{bots: map[string]*client{}, media: media, ledger: ledger, nc: nc}
	for _, b := range bots {
		if err := Validate(b); err != nil {
			return nil, err
		}
		s.bots[b.ID] = newClient(b, hc)
	}
	return s, nil
}

func chunkLimit(b config.TelegramBot) int {
	if b.ChunkLimit > 0 && b.ChunkLimit <= DefaultChunkLimit {
		return b.ChunkLimit
	}
	return DefaultChunkLimit
}

// one is one Telegram message to send.
type one struct {
	text  string // Markdown source of a text message
	media events.Segment
}

// plan cuts a part into Telegram messages.
func plan(content events.Segments, limit int) []one {
	var out []one
	for _, chunk := range im.Chunks(content, limit) {
		var text strings.Builder
		var media []events.Segment
		for _, s := range chunk {
			switch {
			case s.Type == events.SegText:
				text.WriteString(s.Str("text"))
			case s.Type == events.SegAt:
				text.WriteString("@" + strings.TrimPrefix(firstNonEmpty(s.Str("name"), s.MentionID()), "@") + " ")
			case s.IsMedia() && s.Type != events.SegFace && s.Type != events.SegEmoji:
				media = append(media, s)
			}
		}
		if t := strings.TrimSpace(text.String()); t != "" {
			out = append(out, one{text: t})
		}
		for _, m := range media {
			out = append(out, one{media: m})
		}
	}
	return out
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Send implements egress's Sender.
func (s *Sender) Send(ctx context.Context, out events.Outbound) (string, error) {
	c, ok := s.bots[out.Bot]
	if !ok {
		return "", im.Permanent(fmt.Errorf("%w: telegram bot %q is not configured", im.ErrUnknownBot, out.Bot))
	}
	chat, err := chatID(out.Scene.ID)
	if err != nil {
		return "", err
	}
	msgs := plan(out.Content, chunkLimit(c.bot))
	if len(msgs) == 0 {
		return out.OutID, nil
	}
	replyTo, _ := splitMessageID(out.ReplyTo)
	first := ""
	preview := 0
	if out.Part == 0 && out.Turn != "" && s.nc != nil && previewMode(c.bot) != "off" {
		preview = s.takePreview(ctx, out.Bot, out.Turn)
	}
	for k, m := range msgs {
		key := im.ChunkKey(out.OutID, k)
		if id, ok := s.ledger.Sent(ctx, key); ok {
			if k == 0 {
				first = id
			}
			continue
		}
		var id int
		switch {
		case k == 0 && preview != 0 && m.text != "":
			id, err = s.edit(ctx, c, chat, preview, m.text)
			if im.IsPermanent(err) { // the preview is gone (deleted in the chat): send anew
				id, err = s.sendText(ctx, c, chat, m.text, replyTo)
			}
		case m.text != "":
			if k == 0 && preview != 0 {
				s.deletePreview(ctx, c, chat, preview)
			}
			id, err = s.sendText(ctx, c, chat, m.text, replyIf(k == 0, replyTo))
		default:
			if k == 0 && preview != 0 {
				s.deletePreview(ctx, c, chat, preview)
			}
			id, err = s.sendMedia(ctx, c, chat, m.media, replyIf(k == 0, replyTo))
		}
		if err != nil {
			return "", err
		}
		pid := MessageID(chat, id)
		if err := s.ledger.Record(ctx, key, pid); err != nil && k < len(msgs)-1 {
			return "", err
		}
		if k == 0 {
			first = pid
		}
	}
	return first, nil
}

func replyIf(ok bool, id int) int {
	if ok {
		return id
	}
	return 0
}

// sendText sends Markdown text as HTML; if Telegram still cannot parse it (it says so with a
// 400 "can't parse entities"), the same text goes out plain.
func (s *Sender) sendText(ctx context.Context, c *client, chat int64, md string, replyTo int) (int, error) {
	msg := tgbotapi.NewMessage(chat, HTML(md))
	msg.ParseMode = tgbotapi.ModeHTML
	msg.ReplyToMessageID, msg.AllowSendingWithoutReply = replyTo, replyTo != 0
	msg.DisableWebPagePreview = true
	sent, err := c.api(ctx).Send(msg)
	if isParseError(err) {
		msg.Text, msg.ParseMode = md, ""
		sent, err = c.api(ctx).Send(msg)
	}
	if err != nil {
		return 0, classify("sendMessage", err)
	}
	return sent.MessageID, nil
}

func (s *Sender) edit(ctx context.Context, c *client, chat int64, id int, md string) (int, error) {
	e := tgbotapi.NewEditMessageText(chat, id, HTML(md))
	e.ParseMode = tgbotapi.ModeHTML
	e.DisableWebPagePreview = true
	_, err := c.api(ctx).Request(e)
	if isParseError(err) {
		e.Text, e.ParseMode = md, ""
		_, err = c.api(ctx).Request(e)
	}
	if err != nil && strings.Contains(err.Error(), "message is not modified") {
		err = nil // the preview already shows exactly the final text
	}
	if err != nil {
		return 0, classify("editMessageText", err)
	}
	return id, nil
}

func (s *Sender) deletePreview(ctx context.Context, c *client, chat int64, id int) {
	_, _ = c.api(ctx).Request(tgbotapi.NewDeleteMessage(chat, id))
}

func isParseError(err error) bool {
	var te *tgbotapi.Error
	return errors.As(err, &te) && te.Code == http.StatusBadRequest && strings.Contains(strings.ToLower(te.Message), "can't parse")
}

// sendMedia sends one media segment: media:// references are uploaded from the media store,
// URLs passed for Telegram to fetch, Telegram file ids (data.file) resent by id.
func (s *Sender) sendMedia(ctx context.Context, c *client, chat int64, seg events.Segment, replyTo int) (int, error) {
	var file tgbotapi.RequestFileData
	ref := seg.MediaRef()
	if obj := seg.Str("object"); obj != "" && !strings.HasPrefix(ref, im.MediaScheme) {
		ref = im.MediaScheme + obj
	}
	switch {
	case strings.HasPrefix(ref, im.MediaScheme):
		b, _, _, err := s.media.Load(ctx, ref)
		if err != nil {
			return 0, im.Permanent(fmt.Errorf("telegram: %s segment: %w", seg.Type, err))
		}
		name := seg.Str("name")
		if name == "" {
			name = strings.ReplaceAll(strings.TrimPrefix(ref, im.MediaScheme), "/", "_")
		}
		file = tgbotapi.FileBytes{Name: name, Bytes: b}
	case strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://"):
		file = tgbotapi.FileURL(ref)
	case ref != "":
		file = tgbotapi.FileID(ref)
	default:
		return 0, im.Permanent(fmt.Errorf("telegram: %s segment has no url, file or object", seg.Type))
	}
	var cfg tgbotapi.Chattable
	method := "sendDocument"
	switch seg.Type {
	case events.SegImage:
		p := tgbotapi.NewPhoto(chat, file)
		p.ReplyToMessageID, p.AllowSendingWithoutReply = replyTo, replyTo != 0
		cfg, method = p, "sendPhoto"
	case events.SegRecord, events.SegVoice:
		v := tgbotapi.NewVoice(chat, file)
		v.ReplyToMessageID, v.AllowSendingWithoutReply = replyTo, replyTo != 0
		cfg, method = v, "sendVoice"
	case events.SegAudio:
		a := tgbotapi.NewAudio(chat, file)
		a.ReplyToMessageID, a.AllowSendingWithoutReply = replyTo, replyTo != 0
		cfg, method = a, "sendAudio"
	case events.SegVideo:
		v := tgbotapi.NewVideo(chat, file)
		v.ReplyToMessageID, v.AllowSendingWithoutReply = replyTo, replyTo != 0
		cfg, method = v, "sendVideo"
	default:
		d := tgbotapi.NewDocument(chat, file)
		d.ReplyToMessageID, d.AllowSendingWithoutReply = replyTo, replyTo != 0
		cfg = d
	}
	sent, err := c.api(ctx).Send(cfg)
	if err != nil {
		return 0, classify(method, err)
	}
	return sent.MessageID, nil
}

// takePreview asks the previewer for the turn's preview message and makes it stop editing
// it; 0 when there is none (no previewer runs, or it made no preview for the turn).
func (s *Sender) takePreview(ctx context.Context, bot, turn string) int {
	b, _ := json.Marshal(takeRequest{Turn: turn})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := s.nc.RequestWithContext(rctx, PreviewSubject(bot), b)
	if err != nil {
		return 0
	}
	var ans takeAnswer
	if json.Unmarshal(msg.Data, &ans) != nil {
		return 0
	}
	return ans.MessageID
}
