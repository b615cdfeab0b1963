package matrix

import (
	"bytes"
	"context"
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
			case s.IsMedia() && s.Type != events.SegFace && s.Type != events.SegEmoji, s.Type == events.SegCard:
				media = append(media, s) // a card is a message of its own too (card.go)
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
	preview := ""
	if out.Part == 0 && out.Turn != "" {
		// Also when previews are off: the hand-over stops the turn's typing notifications.
		preview = im.TakePreview(ctx, s.nc, Platform, out.Bot, out.Turn)
	}
	p := &part{s: s, b: b, room: room, outID: out.OutID, replyTo: replyTo, msgs: msgs,
		th: thread{root: threadOf(ctx, b.cli, room, replyTo), last: replyTo}}
	first, err := im.SendPart(ctx, s.ledger, out.OutID, preview, p)
	if err == nil && out.Final {
		// The reply is complete: clear the typing notification now rather than at its timeout.
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, _ = b.cli.UserTyping(tctx, room, false, 0)
		cancel()
	}
	return first, err
}

// part is one outbound part's room messages (im.PartMessages); ids are event ids.
type part struct {
	s       *Sender
	b       *bot
	room    id.RoomID
	outID   string
	replyTo id.EventID
	msgs    []one
	th      thread
}

func (p *part) Len() int          { return len(p.msgs) }
func (p *part) IsText(k int) bool { return p.msgs[k].plain != "" }

func (p *part) Send(ctx context.Context, k int) (string, error) {
	m := p.msgs[k]
	c := textContent(m)
	switch {
	case m.plain == "" && m.media.Type == events.SegCard:
		c = cardContent(m.media)
	case m.plain == "":
		var err error
		if c, err = p.s.mediaContent(ctx, p.b, m.media); err != nil {
			return "", err
		}
	}
	evID, err := p.s.send(ctx, p.b, p.room, c, p.th.rel(replyIf(k == 0, p.replyTo)), txnID("send", p.outID, k))
	if err != nil {
		return "", err
	}
	p.th.last = evID
	return evID.String(), nil
}

// Edit replaces the preview with message k (m.replace; m.new_content holds the final
// content). The receipt keeps the preview's event id: that is the message clients show and
// replies point at.
func (p *part) Edit(ctx context.Context, preview string, k int) (string, error) {
	c := textContent(p.msgs[k])
	c.SetEdit(id.EventID(preview))
	if _, err := p.b.cli.SendMessageEvent(ctx, p.room, event.EventMessage, c, mautrix.ReqSendEvent{TransactionID: txnID("edit", p.outID, k)}); err != nil {
		return "", classify("edit", err)
	}
	p.th.last = id.EventID(preview)
	return preview, nil
}

func (p *part) Delete(ctx context.Context, preview string) {
	_, _ = p.b.cli.RedactEvent(ctx, p.room, id.EventID(preview), mautrix.ReqRedact{TxnID: txnID("redact", p.outID, 0), Reason: "preview replaced"})
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

// mediaContent uploads a media segment's bytes to the content repository (media://
// references from the media store, http(s) URLs fetched through the SSRF guard) or reuses
// an mxc:// reference, and returns the m.image / m.audio / m.video / m.file content.
func (s *Sender) mediaContent(ctx context.Context, b *bot, seg events.Segment) (*event.MessageEventContent, error) {
	ref := im.MediaRefOf(seg)
	name := seg.Str("name")
	var data []byte
	var ct string
	var uri id.ContentURIString
	switch {
	case strings.HasPrefix(ref, im.MediaScheme):
		var err error
		if data, ct, name, _, err = s.media.LoadUpload(ctx, Platform, seg); err != nil {
			return nil, err
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
		name = seg.Type + im.ExtFor(ct)
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
