package slack

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/nats-io/nats.go"
	slackapi "github.com/slack-go/slack"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Sender is the egress half of the Slack adapter (egress's Sender contract for platform
// "slack"). One outbound part becomes one or more Slack messages: its text cut at the chunk
// limit (chat.postMessage, &, < and > escaped so model text cannot forge mentions or links),
// then each media segment uploaded as a file, a card as a message with blocks (card.go). Every message goes into the thread of the
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

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// plan cuts a part into Slack messages.
func plan(content events.Segments, limit int) []im.Planned {
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
	unplace := strings.NewReplacer("\x00", "<@", "\x01", ">")
	render := func(s events.Segment) (string, bool) {
		if s.Type == events.SegCard {
			return "", true // a message of its own (card.go)
		}
		return im.RenderText(s)
	}
	return im.Plan(im.Chunks(flat, limit), render, func(t string) string { return unplace.Replace(escaper.Replace(t)) })
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
	if out.Part == 0 && out.Turn != "" {
		preview = im.TakePreview(ctx, s.nc, Platform, out.Bot, out.Turn)
	}
	return im.SendPart(ctx, s.ledger, out.OutID, preview, &part{s: s, b: b, channel: channel, thread: thread, msgs: msgs})
}

// part is one outbound part's Slack messages (im.PartMessages).
type part struct {
	s       *Sender
	b       *webBot
	channel string
	thread  string
	msgs    []im.Planned
}

func (p *part) Len() int          { return len(p.msgs) }
func (p *part) IsText(k int) bool { return p.msgs[k].Text != "" }

func (p *part) Send(ctx context.Context, k int) (string, error) {
	if m := p.msgs[k]; m.Text != "" {
		return p.s.post(ctx, p.b, p.channel, m.Text, p.thread)
	}
	if m := p.msgs[k]; m.Media.Type == events.SegCard {
		return p.s.postCard(ctx, p.b, p.channel, m.Media, p.thread)
	}
	return p.s.upload(ctx, p.b, p.channel, p.msgs[k].Media, p.thread)
}

func (p *part) Edit(ctx context.Context, preview string, k int) (string, error) {
	return p.s.update(ctx, p.b, p.channel, preview, p.msgs[k].Text, p.thread)
}

func (p *part) Delete(ctx context.Context, preview string) {
	ts, _ := splitMessageID(preview)
	_, _, _ = p.b.api.DeleteMessageContext(ctx, p.channel, ts) // cosmetic if it stays
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
	data, ct, name, ok, err := s.media.LoadUpload(ctx, Platform, seg)
	if err != nil {
		return "", err
	}
	ref := im.MediaRefOf(seg)
	switch {
	case ok:
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
		name += im.ExtFor(ct)
	}
	f, err := b.api.UploadFileContext(ctx, slackapi.UploadFileParameters{Reader: bytes.NewReader(data), FileSize: len(data),
		Filename: name, Title: name, Channel: channel, ThreadTimestamp: thread})
	if err != nil {
		return "", classify("files.upload", err)
	}
	return f.ID, nil
}
