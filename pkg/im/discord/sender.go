package discord

import (
	"bytes"
	"context"
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
// the media store, or a URL fetched by Discord through an embed-free link), a card as an embed
// with buttons (card.go). The first message
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

// plan cuts a part into Discord messages.
func plan(content events.Segments, limit int) []im.Planned {
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
	return im.Plan(im.Chunks(flat, limit), func(s events.Segment) (string, bool) {
		if s.Type == events.SegCard {
			return "", true // a message of its own (card.go)
		}
		return im.RenderText(s)
	}, nil)
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
	preview := ""
	if out.Part == 0 && out.Turn != "" {
		// Also when previews are off: the hand-over stops the turn's typing indicator.
		preview = im.TakePreview(ctx, s.nc, Platform, out.Bot, out.Turn)
	}
	return im.SendPart(ctx, s.ledger, out.OutID, preview, &part{s: s, b: b, channel: channel, replyTo: out.ReplyTo, msgs: msgs})
}

// part is one outbound part's Discord messages (im.PartMessages).
type part struct {
	s       *Sender
	b       *restBot
	channel string
	replyTo string
	msgs    []im.Planned
}

func (p *part) Len() int          { return len(p.msgs) }
func (p *part) IsText(k int) bool { return p.msgs[k].Text != "" }

func (p *part) Send(ctx context.Context, k int) (string, error) {
	replyTo := ""
	if k == 0 {
		replyTo = p.replyTo
	}
	m := p.msgs[k]
	if m.Text != "" {
		return p.s.send(ctx, p.b, p.channel, &discordgo.MessageSend{Content: m.Text}, replyTo)
	}
	if m.Media.Type == events.SegCard {
		c, _ := m.Media.Card()
		if c.Validate() != nil { // not from the turn worker: its words, as text
			return p.s.send(ctx, p.b, p.channel, &discordgo.MessageSend{Content: c.PlainText()}, replyTo)
		}
		return p.s.send(ctx, p.b, p.channel, cardMessage(c), replyTo)
	}
	f, err := p.s.file(ctx, m.Media)
	if err != nil {
		return "", err
	}
	return p.s.send(ctx, p.b, p.channel, &discordgo.MessageSend{Files: []*discordgo.File{f}}, replyTo)
}

func (p *part) Edit(ctx context.Context, preview string, k int) (string, error) {
	return p.s.edit(ctx, p.b, p.channel, preview, p.msgs[k].Text)
}

func (p *part) Delete(ctx context.Context, preview string) {
	_ = p.b.s.ChannelMessageDelete(p.channel, preview, discordgo.WithContext(ctx)) // cosmetic if it stays
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
	b, ct, name, ok, err := s.media.LoadUpload(ctx, Platform, seg)
	if err != nil {
		return nil, err
	}
	ref := im.MediaRefOf(seg)
	switch {
	case ok:
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
		b, ct, name = buf.Bytes(), resp.Header.Get("Content-Type"), seg.Str("name")
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
		name += im.ExtFor(ct)
	}
	return &discordgo.File{Name: name, ContentType: ct, Reader: bytes.NewReader(b)}, nil
}
