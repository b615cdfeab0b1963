package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// ReasonIngestFailed is the dead-letter reason (dlq.ingest.ingest_failed) of a message the
// bus kept refusing: the gateway never sends a message again, so it is kept there.
const ReasonIngestFailed = "ingest_failed"

// InboundOptions configure an Inbound.
type InboundOptions struct {
	Bot   config.DiscordBot
	Sink  im.Sink
	Media *im.Media // nil: attachments stay as CDN URLs
	// JS holds the gateway lease and receives dead letters.
	JS    jetstream.JetStream
	Owner string
	TTL   time.Duration
	// HTTP supplies the transport of the REST client (nil: the default transport).
	HTTP *http.Client
	Log  *slog.Logger
}

// Inbound is the ingest half of one Discord bot.
type Inbound struct {
	o       InboundOptions
	log     *slog.Logger
	self    atomic.Pointer[discordgo.User]
	cursors *im.Cursors // backfill cursors; nil without JS
}

// NewInbound validates the bot's configuration.
func NewInbound(o InboundOptions) (*Inbound, error) {
	if err := Validate(o.Bot); err != nil {
		return nil, err
	}
	if o.Sink == nil {
		return nil, errors.New("discord: InboundOptions.Sink is required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Inbound{o: o, log: o.Log.With("platform", Platform, "bot", o.Bot.ID)}, nil
}

// Run holds the bot's gateway session under the single-connection lease until ctx ends.
func (in *Inbound) Run(ctx context.Context) error {
	return im.Hold(ctx, im.HoldOptions{JS: in.o.JS, Key: im.ConnKey(Platform, in.o.Bot.ID), Owner: in.o.Owner, TTL: in.o.TTL, Log: in.log}, in.gateway)
}

// gateway opens a gateway session and keeps it until ctx ends (the library reconnects and
// resumes by itself on a dropped socket). After every READY (a new session) it backfills the
// channels it knows (see backfill.go); MESSAGE_CREATEs wait for that backfill, so a channel's
// messages reach IM_IN in order.
func (in *Inbound) gateway(ctx context.Context) error {
	s, err := newSession(in.o.Bot, in.o.HTTP)
	if err != nil {
		return err
	}
	if in.cursors == nil && in.o.JS != nil {
		if in.cursors, err = im.OpenCursors(ctx, in.o.JS, Platform, in.o.Bot.ID, in.log); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); in.cursors.Run(ctx, 0) }()

	var bfMu sync.Mutex
	bfDone := make(chan struct{})
	close(bfDone)
	s.AddHandler(func(_ *discordgo.Session, r *discordgo.Ready) {
		if r.User != nil {
			in.self.Store(r.User)
			in.log.Info("discord: gateway ready", "user", r.User.ID, "guilds", len(r.Guilds))
			im.Connected(ctx, in.log)
		}
		// The backfill runs beside the gateway (READY is handled inside Open, before the
		// library starts heartbeating), and MESSAGE_CREATEs wait for it.
		done := make(chan struct{})
		bfMu.Lock()
		bfDone = done
		bfMu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			in.backfill(ctx, s)
		}()
	})
	s.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) {
		if m.Message == nil {
			return
		}
		bfMu.Lock()
		done := bfDone
		bfMu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
		if err := in.message(ctx, m.Message, ""); err != nil && !errors.Is(err, events.ErrInvalid) {
			in.log.Error("discord: message not ingested", "message", m.ID, "err", err)
		}
	})
	s.AddHandler(func(s *discordgo.Session, ic *discordgo.InteractionCreate) {
		in.pressButton(ctx, s, ic.Interaction)
	})
	if err := s.Open(); err != nil {
		return fmt.Errorf("discord: open gateway: %w", err)
	}
	<-ctx.Done()
	if err := s.Close(); err != nil {
		in.log.Debug("discord: close gateway", "err", err)
	}
	return ctx.Err()
}

// message ingests one MESSAGE_CREATE. The bot's own messages and other bots' are skipped.
// A message that cannot be normalized is dead-lettered; a sink that keeps failing (the bus
// is down) dead-letters it too, since the gateway never sends it again.
//
// scope is the scene's scope when the message says nothing of it (a REST message has no
// guild_id); "" derives it from guild_id. A message that was handled (ingested, skipped or
// dead-lettered as invalid) moves its channel's backfill cursor.
func (in *Inbound) message(ctx context.Context, msg *discordgo.Message, scope string) error {
	err := in.handle(ctx, msg, scope)
	if err == nil || errors.Is(err, events.ErrInvalid) {
		if msg.ChannelID != "" && msg.ID != "" {
			if scope == "" {
				scope = events.ScopePrivate
				if msg.GuildID != "" {
					scope = events.ScopeGroup
				}
			}
			in.cursors.Note(msg.ChannelID, im.Cursor{Scope: scope, ID: msg.ID, Time: msg.Timestamp.UnixMilli()})
		}
	}
	return err
}

func (in *Inbound) handle(ctx context.Context, msg *discordgo.Message, scope string) error {
	if msg.Author != nil && msg.Author.Bot {
		return nil
	}
	if msg.Type != discordgo.MessageTypeDefault && msg.Type != discordgo.MessageTypeReply {
		return nil // joins, pins, thread starters, ...
	}
	m, err := in.normalize(ctx, msg, scope)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return in.deadLetter(ctx, events.DLQInvalid, err, msg)
	}
	last := im.Ingest(ctx, in.o.Sink, m, 6, 500*time.Millisecond)
	switch {
	case last == nil:
		return nil
	case errors.Is(last, events.ErrInvalid):
		return in.deadLetter(ctx, events.DLQInvalid, last, msg)
	default:
		_ = in.deadLetter(context.WithoutCancel(ctx), ReasonIngestFailed, last, msg)
		return last
	}
}

func (in *Inbound) deadLetter(ctx context.Context, reason string, cause error, msg *discordgo.Message) error {
	in.log.Warn("discord: message rejected", "message", msg.ID, "reason", reason, "err", cause)
	if in.o.JS != nil {
		raw, _ := json.Marshal(msg)
		if err := im.DeadLetter(ctx, in.o.JS, Platform+"/"+in.o.Bot.ID, reason, cause, raw); err != nil {
			in.log.Error("discord: dead letter", "err", err)
		}
	}
	if errors.Is(cause, events.ErrInvalid) || reason != events.DLQInvalid {
		return cause
	}
	return fmt.Errorf("%w: %v", events.ErrInvalid, cause)
}

// normalize maps a Discord message to the bus's IMMessage.
func (in *Inbound) normalize(ctx context.Context, msg *discordgo.Message, scope string) (*events.IMMessage, error) {
	if msg.ID == "" || msg.ChannelID == "" {
		return nil, errors.New("message has no id or channel_id")
	}
	m := &events.IMMessage{Platform: Platform, Bot: in.o.Bot.ID, MessageID: msg.ID}
	if !msg.Timestamp.IsZero() {
		m.Time = msg.Timestamp.UnixMilli()
	}
	switch {
	case scope != "":
		m.Scene = events.Scene{Type: scope, ID: msg.ChannelID}
	case msg.GuildID == "":
		m.Scene = events.Scene{Type: events.ScopePrivate, ID: msg.ChannelID}
	default:
		m.Scene = events.Scene{Type: events.ScopeGroup, ID: msg.ChannelID}
	}
	if a := msg.Author; a != nil {
		name := a.GlobalName
		if name == "" {
			name = a.Username
		}
		if msg.Member != nil && msg.Member.Nick != "" {
			name = msg.Member.Nick
		}
		m.Sender = events.Sender{ID: a.ID, Name: name}
	}
	self := in.self.Load()
	if r := msg.MessageReference; r != nil && r.MessageID != "" {
		m.Content = append(m.Content, events.ReplySeg(r.MessageID))
		if self != nil && msg.ReferencedMessage != nil && msg.ReferencedMessage.Author != nil && msg.ReferencedMessage.Author.ID == self.ID {
			m.MentionsBot = true // a reply to the bot addresses it
		}
	}
	names := map[string]string{}
	for _, u := range msg.Mentions {
		if u != nil {
			names[u.ID] = u.Username
		}
	}
	segs, mention := textSegments(msg.Content, self, names)
	m.MentionsBot = m.MentionsBot || mention
	m.Content = append(m.Content, segs...)
	for i, a := range msg.Attachments {
		if a == nil || a.URL == "" {
			continue
		}
		seg := events.Segment{Type: attachmentType(a), Data: map[string]any{"name": a.Filename}}
		if a.ContentType != "" {
			seg.Data["mimeType"] = a.ContentType
		}
		if in.o.Media == nil {
			seg.Data["url"] = a.URL
			m.Content = append(m.Content, seg)
			continue
		}
		m.Content = append(m.Content, in.o.Media.StoreSegment(ctx, seg, a.URL, im.MediaName(Platform, in.o.Bot.ID, msg.ID, i+1)))
	}
	return m, nil
}

func attachmentType(a *discordgo.MessageAttachment) string {
	ct := a.ContentType
	switch {
	case strings.HasPrefix(ct, "image/"):
		return events.SegImage
	case strings.HasPrefix(ct, "video/"):
		return events.SegVideo
	case strings.HasPrefix(ct, "audio/"):
		if a.Waveform != "" { // a voice message
			return events.SegRecord
		}
		return events.SegAudio
	}
	return events.SegFile
}

var mentionRe = regexp.MustCompile(`<@!?([0-9]+)>`)

// textSegments splits content at user mentions (<@id>, <@!id>): the bot's own mention is
// dropped from the text and reported; others become at segments (name from the message's
// mentions when known).
func textSegments(content string, self *discordgo.User, names map[string]string) (events.Segments, bool) {
	if content == "" {
		return nil, false
	}
	var out events.Segments
	mention := false
	pos := 0
	text := func(s string) {
		if s != "" {
			out = append(out, events.TextSeg(s))
		}
	}
	for _, loc := range mentionRe.FindAllStringSubmatchIndex(content, -1) {
		id := content[loc[2]:loc[3]]
		if self != nil && id == self.ID {
			text(content[pos:loc[0]])
			mention = true
			pos = loc[1]
			// drop one space after the stripped mention
			if pos < len(content) && content[pos] == ' ' && (len(out) == 0 || strings.HasSuffix(content[:loc[0]], " ")) {
				pos++
			}
			continue
		}
		text(content[pos:loc[0]])
		out = append(out, events.AtSeg(id, names[id]))
		pos = loc[1]
	}
	text(content[pos:])
	return out, mention
}
