package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Sender is the egress half of the Telegram adapter (egress's Sender contract for platform
// "telegram"). One outbound part becomes one or more Telegram messages: its text cut at the
// chunk limit (sendMessage, HTML parse mode), then each media segment (sendPhoto,
// sendVoice, sendAudio, sendVideo, sendDocument), a card as a message with an inline keyboard
// (card.go). The first message answers the message the
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

// plan cuts a part into Telegram messages.
func plan(content events.Segments, limit int) []im.Planned {
	return im.Plan(im.Chunks(content, limit), func(s events.Segment) (string, bool) {
		switch {
		case s.Type == events.SegText:
			return s.Str("text"), false
		case s.Type == events.SegAt:
			return "@" + strings.TrimPrefix(firstNonEmpty(s.Str("name"), s.MentionID()), "@") + " ", false
		case s.IsMedia() && s.Type != events.SegFace && s.Type != events.SegEmoji:
			return "", true // stickers too: Telegram has them
		case s.Type == events.SegCard:
			return "", true // a message of its own (card.go)
		}
		return "", false
	}, nil)
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
	preview := ""
	if out.Part == 0 && out.Turn != "" {
		// Also when previews are off: the hand-over stops the turn's typing indicator.
		preview = im.TakePreview(ctx, s.nc, Platform, out.Bot, out.Turn)
	}
	return im.SendPart(ctx, s.ledger, out.OutID, preview, &part{s: s, c: c, chat: chat, replyTo: replyTo, msgs: msgs})
}

// part is one outbound part's Telegram messages (im.PartMessages); ids are MessageID's
// "<chat>_<message>".
type part struct {
	s       *Sender
	c       *client
	chat    int64
	replyTo int
	msgs    []im.Planned
}

func (p *part) Len() int          { return len(p.msgs) }
func (p *part) IsText(k int) bool { return p.msgs[k].Text != "" }

func (p *part) Send(ctx context.Context, k int) (string, error) {
	m := p.msgs[k]
	var id int
	var err error
	if m.Text != "" {
		id, err = p.s.sendText(ctx, p.c, p.chat, m.Text, replyIf(k == 0, p.replyTo))
	} else if m.Media.Type == events.SegCard {
		id, err = p.s.sendCard(ctx, p.c, p.chat, m.Media, replyIf(k == 0, p.replyTo))
	} else {
		id, err = p.s.sendMedia(ctx, p.c, p.chat, m.Media, replyIf(k == 0, p.replyTo))
	}
	if err != nil {
		return "", err
	}
	return MessageID(p.chat, id), nil
}

func (p *part) Edit(ctx context.Context, preview string, k int) (string, error) {
	msg, ok := splitMessageID(preview)
	if !ok {
		return "", im.Permanentf(Platform, "editMessageText", "preview id %q is not a message id", preview)
	}
	id, err := p.s.edit(ctx, p.c, p.chat, msg, p.msgs[k].Text)
	if err != nil {
		return "", err
	}
	return MessageID(p.chat, id), nil
}

func (p *part) Delete(ctx context.Context, preview string) {
	if msg, ok := splitMessageID(preview); ok {
		_ = p.c.inChat(ctx, p.chat, false, func(api *tgbotapi.BotAPI) error { // cosmetic if it stays
			_, err := api.Request(tgbotapi.NewDeleteMessage(p.chat, msg))
			return err
		})
	}
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
	var sent tgbotapi.Message
	send := func(api *tgbotapi.BotAPI) (err error) { sent, err = api.Send(msg); return err }
	err := c.inChat(ctx, chat, true, send)
	if isParseError(err) {
		msg.Text, msg.ParseMode = md, ""
		err = c.inChat(ctx, chat, true, send)
	}
	if err != nil {
		return 0, classifyChat("sendMessage", err)
	}
	return sent.MessageID, nil
}

func (s *Sender) edit(ctx context.Context, c *client, chat int64, id int, md string) (int, error) {
	e := tgbotapi.NewEditMessageText(chat, id, HTML(md))
	e.ParseMode = tgbotapi.ModeHTML
	e.DisableWebPagePreview = true
	request := func(api *tgbotapi.BotAPI) error { _, err := api.Request(e); return err }
	err := c.inChat(ctx, chat, true, request)
	if isParseError(err) {
		e.Text, e.ParseMode = md, ""
		err = c.inChat(ctx, chat, true, request)
	}
	if err != nil && strings.Contains(err.Error(), "message is not modified") {
		err = nil // the preview already shows exactly the final text
	}
	if err != nil {
		return 0, classifyChat("editMessageText", err)
	}
	return id, nil
}

func isParseError(err error) bool {
	var te *tgbotapi.Error
	return errors.As(err, &te) && te.Code == http.StatusBadRequest && strings.Contains(strings.ToLower(te.Message), "can't parse")
}

// sendMedia sends one media segment: media:// references are uploaded from the media store,
// URLs passed for Telegram to fetch, Telegram file ids (data.file) resent by id.
func (s *Sender) sendMedia(ctx context.Context, c *client, chat int64, seg events.Segment, replyTo int) (int, error) {
	var file tgbotapi.RequestFileData
	b, _, name, ok, err := s.media.LoadUpload(ctx, Platform, seg)
	if err != nil {
		return 0, err
	}
	ref := im.MediaRefOf(seg)
	switch {
	case ok:
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
	var sent tgbotapi.Message
	err = c.inChat(ctx, chat, true, func(api *tgbotapi.BotAPI) (err error) { sent, err = api.Send(cfg); return err })
	if err != nil {
		return 0, classifyChat(method, err)
	}
	return sent.MessageID, nil
}
