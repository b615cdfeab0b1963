package discord

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Streaming previews and typing run on the shared previewer (im.RunPreviewer): one Discord
// message created once there are a few words and edited (PATCH) at most once per
// previewIntervalMs ("partial") or once per finished paragraph ("block"); the typing
// indicator (POST /channels/{id}/typing, shown for 10 s) is triggered every 8 s while a turn
// runs, previews on or off. Mentions in a preview never ping anyone.

// typingEvery is how often the typing indicator is triggered.
const typingEvery = 8 * time.Second

// PreviewSubject is where the previewer of bot takes hand-over requests.
func PreviewSubject(bot string) string { return im.PreviewSubject(Platform, bot) }

// PreviewerOptions configure RunPreviewer.
type PreviewerOptions struct {
	Bot   config.DiscordBot
	NC    *nats.Conn
	JS    jetstream.JetStream
	Owner string
	HTTP  *http.Client
	Log   *slog.Logger
	TTL   time.Duration
}

// RunPreviewer runs the bot's previewer and typing indicator while this replica holds its
// lease, until ctx ends.
func RunPreviewer(ctx context.Context, o PreviewerOptions) error {
	s, err := newSession(o.Bot, o.HTTP)
	if err != nil {
		return err
	}
	interval := time.Second
	if ms := o.Bot.PreviewIntervalMs; ms > 0 {
		interval = time.Duration(ms) * time.Millisecond
	}
	return im.RunPreviewer(ctx, im.PreviewOptions{Platform: Platform, Bot: o.Bot.ID, Mode: previewMode(o.Bot),
		Interval: interval, Limit: DefaultChunkLimit, TypingEvery: typingEvery, Editor: editor{s},
		NC: o.NC, JS: o.JS, Owner: o.Owner, TTL: o.TTL, Log: o.Log})
}

// editor is the previewer's Discord side.
type editor struct{ s *discordgo.Session }

var noMentions = &discordgo.MessageAllowedMentions{}

func (e editor) SendPreview(ctx context.Context, sk events.SessionKey, replyTo, text string) (string, error) {
	m := &discordgo.MessageSend{Content: text, AllowedMentions: noMentions}
	if replyTo != "" {
		no := false
		m.Reference = &discordgo.MessageReference{MessageID: replyTo, ChannelID: sk.Scene, FailIfNotExists: &no}
	}
	sent, err := e.s.ChannelMessageSendComplex(sk.Scene, m, discordgo.WithContext(ctx))
	if err != nil {
		return "", classify("createMessage", err)
	}
	return sent.ID, nil
}

func (e editor) EditPreview(ctx context.Context, sk events.SessionKey, id, text string) error {
	ed := discordgo.NewMessageEdit(sk.Scene, id).SetContent(text)
	ed.AllowedMentions = noMentions
	if _, err := e.s.ChannelMessageEditComplex(ed, discordgo.WithContext(ctx)); err != nil {
		return classify("editMessage", err)
	}
	return nil
}

func (e editor) Typing(ctx context.Context, sk events.SessionKey) error {
	return classify("triggerTyping", e.s.ChannelTyping(sk.Scene, discordgo.WithContext(ctx)))
}
