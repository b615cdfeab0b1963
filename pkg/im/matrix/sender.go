package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // image sizes for m.image info
	_ "image/jpeg"
	_ "image/png"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/format"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Sender is the egress half of the Matrix adapter (egress's Sender contract for platform
// "matrix"). One outbound part becomes one or more room messages: its text cut at the chunk
// limit, then each media segment uploaded and sent. The first message is a rich reply to the
// message the part answers. Each message is recorded in the ledger, so a retried part resumes
// after the messages already sent, and carries a transaction id derived from the out id, so
// a send whose answer was lost is not doubled by the homeserver. When a streaming preview of
// the turn is showing, part 0 replaces it with an m.replace edit instead of a new message.
// Send is safe for concurrent use.
type Sender struct {
	bots   map[string]*bot
	media  *im.Media
	ledger *im.Ledger
	nc     *nats.Conn // asks the previewer to hand over a turn's preview; nil = no previews
}

type bot struct {
	cfg config.MatrixBot
	cli *mautrix.Client
}

// NewSender returns the sender for bots (hc nil: a 60 s client).
func NewSender(bots []config.MatrixBot, hc *http.Client, media *im.Media, ledger *im.Ledger, nc *nats.Conn) (*Sender, error) {
	s := &Sender{bots: map[string]*bot{}, media: media, ledger: ledger, nc: nc}
	for _, b := range bots {
		if err := Validate(b); err != nil {
			return nil, err
		}
		c, err := newClient(b, hc)
		if err != nil {
			return nil, err
		}
		s.bots[b.ID] = &bot{cfg: b, cli: c}
	}
	return s, nil
}

// one is one room message to send.
type one struct {
	md, plain string         // text message: Markdown source with pills as links, and plain text
	mentions  []id.UserID    // at segments
	media     events.Segment // a media message
}

// plan cuts a part into room messages.
func plan(content events.Segments, limit int) []one {
	var out []one
	for _, chunk := range im.Chunks(content, limit) {
		var md, plain strings.Builder
		var users []id.UserID
		var media []events.Segment
		for _, s := range chunk {
			switch {
			case s.Type == events.SegText:
				md.WriteString(s.Str("text"))
				plain.WriteString(s.Str("text"))
			case s.Type == events.SegAt:
				uid := id.UserID(s.MentionID())
				name := firstNonEmpty(s.Str("name"), uid.Localpart(), uid.String())
				if strings.HasPrefix(uid.String(), "@") && strings.Contains(uid.String(), ":") {
					md.WriteString(format.MarkdownMentionWithName(name, uid) + " ")
					users = append(users, uid)
				} else {
					md.WriteString("@" + format.EscapeMarkdown(name) + " ")
				}
				plain.WriteString(name + " ")
			case s.IsMedia() && s.Type != events.SegFace && s.Type != events.SegEmoji:
				media = append(media, s)
			}
		}
		if strings.TrimSpace(plain.String()) != "" {
			out = append(out, one{md: strings.TrimSpace(md.String()), plain: strings.TrimSpace(plain.String()), mentions: users})
		}
		for _, m := range media {
			out = append(out, one{media: m})
		}
	}
	return out
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// textContent renders a text message: HTML from the Markdown (raw HTML escaped), the plain
// text as body, pills and at segments as m.mentions.
func textContent(m one) *event.MessageEventContent {
	c := format.RenderMarkdown(m.md, true, false)
	c.MsgType = event.MsgText
	c.Body = m.plain
	if c.Mentions == nil {
		c.Mentions = &event.Mentions{}
	}
	for _, u := range m.mentions {
		c.Mentions.Add(u)
	}
	if c.FormattedBody == "" || c.FormattedBody == event.TextToHTML(c.Body) {
		c.Format, c.FormattedBody = "", "" // nothing a plain body does not show
	}
	return &c
}

// Send implements egress's Sender.
func (s *Sender) Send(ctx context.Context, out events.Outbound) (string, error) {
	b, ok := s.bots[out.Bot]
	if !ok {
		return "", im.Permanent(fmt.Errorf("%w: matrix bot %q is not configured", im.ErrUnknownBot, out.Bot))
	}
	room := id.RoomID(out.Scene.ID)
	if !strings.HasPrefix(out.Scene.ID, "!") {
		return "", im.Permanent(fmt.Errorf("matrix: scene id %q is not a room id", out.Scene.ID))
	}
	msgs := plan(out.Content, chunkLimit(b.cfg))
	if len(msgs) == 0 {
		return out.OutID, nil
	}
	replyTo := id.EventID("")
	if strings.HasPrefix(out.ReplyTo, "$") {
		replyTo = id.EventID(out.ReplyTo)
	}
	preview := id.EventID("")
	if out.Part == 0 && out.Turn != "" && s.nc != nil && previewMode(b.cfg) != "off" {
		preview = s.takePreview(ctx, out.Bot, out.Turn)
	}
	th := thread{root: threadOf(ctx, b.cli, room, replyTo), last: replyTo}
	first := ""
	for k, m := range msgs {
		key := im.ChunkKey(out.OutID, k)
		if pid, ok := s.ledger.Sent(ctx, key); ok {
			if k == 0 {
				first = pid
			}
			continue
		}
		var evID id.EventID
		var err error
		switch {
		case k == 0 && preview != "" && m.plain != "":
			evID, err = s.edit(ctx, b, room, preview, textContent(m), txnID("edit", out.OutID, k))
			if im.IsPermanent(err) { // the preview is gone (redacted): send anew
				evID, err = s.send(ctx, b, room, textContent(m), th.rel(replyTo), txnID("send", out.OutID, k))
			}
		case m.plain != "":
			if k == 0 && preview != "" {
				s.redact(ctx, b, room, preview, out.OutID)
			}
			evID, err = s.send(ctx, b, room, textContent(m), th.rel(replyIf(k == 0, replyTo)), txnID("send", out.OutID, k))
		default:
			if k == 0 && preview != "" {
				s.redact(ctx, b, room, preview, out.OutID)
			}
			var c *event.MessageEventContent
			if c, err = s.mediaContent(ctx, b, m.media); err == nil {
				evID, err = s.send(ctx, b, room, c, th.rel(replyIf(k == 0, replyTo)), txnID("send", out.OutID, k))
			}
		}
		if err != nil {
			return "", err
		}
		if err := s.ledger.Record(ctx, key, evID.String()); err != nil && k < len(msgs)-1 {
			return "", err
		}
		if k == 0 {
			first = evID.String()
		}
		th.last = evID
	}
	if out.Final {
		// The reply is complete: stop the typing notification the previewer started.
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, _ = b.cli.UserTyping(tctx, room, false, 0)
		cancel()
	}
	return first, nil
}

func replyIf(ok bool, evID id.EventID) id.EventID {
	if ok {
		return evID
	}
	return ""
}

// thread is where a part's messages go: the main timeline (root ""), or the thread (m.thread)
// the message they answer is in; last is the latest message of the part there.
type thread struct {
	root, last id.EventID
}

// rel is the m.relates_to of the next message: a rich reply to replyTo (when set), in the
// thread when there is one; a later message of the part in a thread falls back to the
// previous one, as thread-unaware clients need.
func (t *thread) rel(replyTo id.EventID) *event.RelatesTo {
	switch {
	case t.root != "" && replyTo != "":
		return (&event.RelatesTo{}).SetThread(t.root, "").SetReplyTo(replyTo)
	case t.root != "":
		return (&event.RelatesTo{}).SetThread(t.root, t.last)
	case replyTo != "":
		return (&event.RelatesTo{}).SetReplyTo(replyTo)
	}
	return nil
}

// threadOf is the root of the thread event evID is in ("" when it is not in one, or the
// event cannot be read: the reply then goes to the main timeline).
func threadOf(ctx context.Context, cli *mautrix.Client, room id.RoomID, evID id.EventID) id.EventID {
	if evID == "" {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	evt, err := cli.GetEvent(rctx, room, evID)
	if err != nil {
		return ""
	}
	if err := evt.Content.ParseRaw(evt.Type); err != nil && !errors.Is(err, event.ErrContentAlreadyParsed) {
		return ""
	}
	if m, ok := evt.Content.Parsed.(*event.MessageEventContent); ok {
		return m.RelatesTo.GetThreadParent()
	}
	return ""
}

func (s *Sender) send(ctx context.Context, b *bot, room id.RoomID, c *event.MessageEventContent, rel *event.RelatesTo, txn string) (id.EventID, error) {
	c.RelatesTo = rel
	resp, err := b.cli.SendMessageEvent(ctx, room, event.EventMessage, c, mautrix.ReqSendEvent{TransactionID: txn})
	if err != nil {
		return "", classify("send", err)
	}
	return resp.EventID, nil
}

// edit replaces message orig with c (m.replace; m.new_content holds c). The receipt keeps
// the original event id: that is the message clients show and replies point at.
func (s *Sender) edit(ctx context.Context, b *bot, room id.RoomID, orig id.EventID, c *event.MessageEventContent, txn string) (id.EventID, error) {
	c.SetEdit(orig)
	if _, err := b.cli.SendMessageEvent(ctx, room, event.EventMessage, c, mautrix.ReqSendEvent{TransactionID: txn}); err != nil {
		return "", classify("edit", err)
	}
	return orig, nil
}

func (s *Sender) redact(ctx context.Context, b *bot, room id.RoomID, evID id.EventID, outID string) {
	_, _ = b.cli.RedactEvent(ctx, room, evID, mautrix.ReqRedact{TxnID: txnID("redact", outID, 0), Reason: "preview replaced"})
}

// mediaContent uploads a media segment's bytes to the content repository (media://
// references from the media store, http(s) URLs fetched through the SSRF guard) or reuses
// an mxc:// reference, and returns the m.image / m.audio / m.video / m.file content.
func (s *Sender) mediaContent(ctx context.Context, b *bot, seg events.Segment) (*event.MessageEventContent, error) {
	ref := seg.MediaRef()
	if obj := seg.Str("object"); obj != "" && !strings.HasPrefix(ref, im.MediaScheme) {
		ref = im.MediaScheme + obj
	}
	name := seg.Str("name")
	var data []byte
	var ct string
	var uri id.ContentURIString
	switch {
	case strings.HasPrefix(ref, im.MediaScheme):
		var err error
		if data, ct, _, err = s.media.Load(ctx, ref); err != nil {
			return nil, im.Permanent(fmt.Errorf("matrix: %s segment: %w", seg.Type, err))
		}
		if name == "" {
			name = path.Base(strings.TrimPrefix(ref, im.MediaScheme))
		}
	case strings.HasPrefix(ref, "mxc://"):
		uri = id.ContentURIString(ref)
	case strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://"):
		var err error
		if data, ct, err = s.fetch(ctx, ref); err != nil {
			return nil, err
		}
		if name == "" {
			name = path.Base(ref)
		}
	default:
		return nil, im.Permanent(fmt.Errorf("matrix: %s segment has no media://, mxc:// or http(s) reference", seg.Type))
	}
	if ct == "" {
		ct = seg.Str("mimeType")
	}
	if data != nil && (ct == "" || ct == "application/octet-stream") {
		ct = http.DetectContentType(data)
	}
	if name == "" {
		name = seg.Type
	}
	info := &event.FileInfo{MimeType: ct}
	if data != nil {
		info.Size = len(data)
		if seg.Type == events.SegImage {
			if cfg, _, err := image.DecodeConfig(bytes.NewReader(data)); err == nil {
				info.Width, info.Height = cfg.Width, cfg.Height
			}
		}
		up, err := b.cli.UploadBytesWithName(ctx, data, ct, name)
		if err != nil {
			return nil, classify("upload", err)
		}
		uri = up.ContentURI.CUString()
	}
	c := &event.MessageEventContent{Body: name, URL: uri, Info: info, Mentions: &event.Mentions{}}
	switch seg.Type {
	case events.SegImage:
		c.MsgType = event.MsgImage
	case events.SegAudio, events.SegRecord, events.SegVoice:
		c.MsgType = event.MsgAudio
	case events.SegVideo:
		c.MsgType = event.MsgVideo
	default:
		c.MsgType = event.MsgFile
	}
	return c, nil
}

// fetch downloads a web URL for upload through the media helper's SSRF guard.
func (s *Sender) fetch(ctx context.Context, rawURL string) ([]byte, string, error) {
	if s.media == nil {
		return nil, "", im.Permanent(fmt.Errorf("matrix: no media helper to fetch %s", rawURL))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, "", im.Permanent(fmt.Errorf("matrix: media url: %w", err))
	}
	hc := s.media.Client()
	hc.Timeout = time.Minute
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", im.Permanent(fmt.Errorf("matrix: fetch media: %w", err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, "", im.Permanent(fmt.Errorf("matrix: fetch media: HTTP %d", resp.StatusCode))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, im.MaxMedia+1))
	if err != nil || len(b) > im.MaxMedia {
		return nil, "", im.Permanent(fmt.Errorf("matrix: fetch media: unreadable or over %d bytes", im.MaxMedia))
	}
	return b, resp.Header.Get("Content-Type"), nil
}

// takePreview asks the previewer for the turn's preview event and makes it stop editing it;
// "" when there is none.
func (s *Sender) takePreview(ctx context.Context, botID, turn string) id.EventID {
	b, _ := json.Marshal(takeRequest{Turn: turn})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := s.nc.RequestWithContext(rctx, PreviewSubject(botID), b)
	if err != nil {
		return ""
	}
	var ans takeAnswer
	if json.Unmarshal(msg.Data, &ans) != nil {
		return ""
	}
	return id.EventID(ans.EventID)
}
