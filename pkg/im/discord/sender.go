package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Sender is the egress half of the Discord adapter (egress's Sender contract for platform
// "discord"). One outbound part becomes one or more Discord messages: its text cut at the
// chunk limit, then each media segment as a message with the file attached (uploaded from
// the media store, or a URL fetched by Discord through an embed-free link). The first message
// answers the message the part replies to (message_reference, fail_if_not_exists false).
// Mentions are limited to users (the model cannot ping @everyone or roles). Each message is
// recorded in the ledger, so a retried part resumes after the messages already sent. When a
// streaming preview of the turn is showing, part 0 replaces it (PATCH) instead of sending a
// new message.
type Sender struct {
	bots   map[string]*restBot
	media  *im.Media
	ledger *im.Ledger
	nc     *nats.Conn // asks the previewer to hand over a turn's preview; nil = no previews
}

type restBot struct {
	bot config.DiscordBot
	s   *discordgo.Session
}

// NewSender returns the sender for bots (REST only: nothing connects to the gateway).
func NewSender(bots []config.DiscordBot, hc *http.Client, media *im.Media, ledger *im.Ledger, nc *nats.Conn) (*Sender, error) {
	s := &Sender{bots: map[string]*restBot{}, media: media, ledger: ledger, nc: nc}
	for _, b := range bots {
		if err := Validate(b); err != nil {
			return nil, err
		}
		sess, err := newSession(b, hc)
		if err != nil {
			return nil, err
		}
		s.bots[b.ID] = &restBot{bot: b, s: sess}
	}
	return s, nil
}

// one is one Discord message to send.
type one struct {
	text  string
	media events.Segment
}

// plan cuts a part into Discord messages.
func plan(content events.Segments, limit int) []one {
	// Mentions become their <@id> text first, so the chunk limit counts them, and runs of
	// text are joined so a mention is not cut off from the sentence it starts.
	flat := make(events.Segments, 0, len(content))
	for _, s := range content {
		if s.Type == events.SegAt {
			id := s.MentionID()
			if id == "" {
				continue
			}
			s = events.TextSeg("<@" + id + "> ")
		}
		if n := len(flat); n > 0 && s.Type == events.SegText && flat[n-1].Type == events.SegText {
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
			out = append(out, one{text: t})
		}
		for _, m := range media {
			out = append(out, one{media: m})
		}
	}
	return out
}

var allowedMentions = &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{discordgo.AllowedMentionTypeUsers}, RepliedUser: true}

// Send implements egress's Sender.
func (s *Sender) Send(ctx context.Context, out events.Outbound) (string, error) {
	b, ok := s.bots[out.Bot]
	if !ok {
		return "", im.Permanent(fmt.Errorf("%w: discord bot %q is not configured", im.ErrUnknownBot, out.Bot))
	}
	channel := out.Scene.ID
	if channel == "" {
		return "", im.Permanent(fmt.Errorf("discord: outbound %s has no channel", out.OutID))
	}
	msgs := plan(out.Content, chunkLimit(b.bot))
	if len(msgs) == 0 {
		return out.OutID, nil
	}
	first := ""
	preview := ""
	if out.Part == 0 && out.Turn != "" && s.nc != nil && previewMode(b.bot) != "off" {
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
		var id string
		var err error
		replyTo := ""
		if k == 0 {
			replyTo = out.ReplyTo
		}
		switch {
		case k == 0 && preview != "" && m.text != "":
			id, err = s.edit(ctx, b, channel, preview, m.text)
			if im.IsPermanent(err) { // the preview is gone (deleted in the channel): send anew
				id, err = s.send(ctx, b, channel, &discordgo.MessageSend{Content: m.text}, replyTo)
			}
		case m.text != "":
			s.dropPreview(ctx, b, channel, k, &preview)
			id, err = s.send(ctx, b, channel, &discordgo.MessageSend{Content: m.text}, replyTo)
		default:
			s.dropPreview(ctx, b, channel, k, &preview)
			var f *discordgo.File
			if f, err = s.file(ctx, m.media); err == nil {
				id, err = s.send(ctx, b, channel, &discordgo.MessageSend{Files: []*discordgo.File{f}}, replyTo)
			}
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

func (s *Sender) dropPreview(ctx context.Context, b *restBot, channel string, k int, preview *string) {
	if k != 0 || *preview == "" {
		return
	}
	if err := b.s.ChannelMessageDelete(channel, *preview, discordgo.WithContext(ctx)); err != nil {
		_ = err // a preview left behind is cosmetic
	}
	*preview = ""
}

func (s *Sender) send(ctx context.Context, b *restBot, channel string, m *discordgo.MessageSend, replyTo string) (string, error) {
	m.AllowedMentions = allowedMentions
	if replyTo != "" {
		no := false
		m.Reference = &discordgo.MessageReference{MessageID: replyTo, ChannelID: channel, FailIfNotExists: &no}
	}
	sent, err := b.s.ChannelMessageSendComplex(channel, m, discordgo.WithContext(ctx))
	if err != nil {
		return "", classify("createMessage", err)
	}
	return sent.ID, nil
}

func (s *Sender) edit(ctx context.Context, b *restBot, channel, id, text string) (string, error) {
	e := discordgo.NewMessageEdit(channel, id).SetContent(text)
	e.AllowedMentions = allowedMentions
	if _, err := b.s.ChannelMessageEditComplex(e, discordgo.WithContext(ctx)); err != nil {
		return "", classify("editMessage", err)
	}
	return id, nil
}

// file reads a media segment for upload: media:// references from the media store; an
// http(s) URL is fetched through the SSRF guard.
func (s *Sender) file(ctx context.Context, seg events.Segment) (*discordgo.File, error) {
	ref := seg.MediaRef()
	if obj := seg.Str("object"); obj != "" && !strings.HasPrefix(ref, im.MediaScheme) {
		ref = im.MediaScheme + obj
	}
	name := seg.Str("name")
	var b []byte
	var ct string
	switch {
	case strings.HasPrefix(ref, im.MediaScheme):
		var err error
		if b, ct, _, err = s.media.Load(ctx, ref); err != nil {
			return nil, im.Permanent(fmt.Errorf("discord: %s segment: %w", seg.Type, err))
		}
		if name == "" {
			name = strings.ReplaceAll(strings.TrimPrefix(ref, im.MediaScheme), "/", "_")
		}
	case strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://"):
		if s.media == nil {
			return nil, im.Permanent(fmt.Errorf("discord: %s segment by URL needs the media store", seg.Type))
		}
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(fctx, http.MethodGet, ref, nil)
		if err != nil {
			return nil, im.Permanent(fmt.Errorf("discord: %s segment: %w", seg.Type, err))
		}
		resp, err := s.media.Client().Do(req)
		if err != nil {
			return nil, fmt.Errorf("discord: fetch %s: %w", seg.Type, err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(http.MaxBytesReader(nil, resp.Body, im.MaxMedia)); err != nil || resp.StatusCode != http.StatusOK {
			return nil, im.Permanent(fmt.Errorf("discord: fetch %s: HTTP %d %v", seg.Type, resp.StatusCode, err))
		}
		b, ct = buf.Bytes(), resp.Header.Get("Content-Type")
		if name == "" {
			name = path.Base(resp.Request.URL.Path)
		}
	default:
		return nil, im.Permanent(fmt.Errorf("discord: %s segment has no url or object", seg.Type))
	}
	if ct == "" {
		ct = http.DetectContentType(b)
	}
	if path.Ext(name) == "" {
		name += extFor(ct)
	}
	return &discordgo.File{Name: name, ContentType: ct, Reader: bytes.NewReader(b)}, nil
}

func extFor(ct string) string {
	switch {
	case strings.HasPrefix(ct, "image/png"):
		return ".png"
	case strings.HasPrefix(ct, "image/jpeg"):
		return ".jpg"
	case strings.HasPrefix(ct, "image/gif"):
		return ".gif"
	case strings.HasPrefix(ct, "image/webp"):
		return ".webp"
	case strings.HasPrefix(ct, "audio/ogg"):
		return ".ogg"
	case strings.HasPrefix(ct, "video/mp4"):
		return ".mp4"
	}
	return ".bin"
}

// takePreview asks the previewer for the turn's preview message and makes it stop editing
// it; "" when there is none.
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
