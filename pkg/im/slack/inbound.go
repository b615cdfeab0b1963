package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	slackapi "github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// InboundOptions configure an Inbound.
type InboundOptions struct {
	Bot   config.SlackBot
	Sink  im.Sink
	Media *im.Media // nil: files stay as url_private references
	// JS holds the socket lease and receives dead letters.
	JS    jetstream.JetStream
	Owner string
	TTL   time.Duration
	// HTTP is the Web API client (nil: a 30 s client).
	HTTP *http.Client
	Log  *slog.Logger
}

// Inbound is the ingest half of one Slack bot.
type Inbound struct {
	o    InboundOptions
	api  *slackapi.Client
	log  *slog.Logger
	self atomic.Pointer[identity]
}

type identity struct{ user, bot string }

// NewInbound validates the bot's configuration.
func NewInbound(o InboundOptions) (*Inbound, error) {
	if err := Validate(o.Bot); err != nil {
		return nil, err
	}
	if o.Sink == nil {
		return nil, errors.New("slack: InboundOptions.Sink is required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Inbound{o: o, api: newAPI(o.Bot, o.HTTP), log: o.Log.With("platform", Platform, "bot", o.Bot.ID)}, nil
}

// Run runs the bot's inbound side until ctx ends: in Socket Mode the socket under the
// single-connection lease; with the Events API it only learns the bot's identity and waits
// (requests arrive through Routes).
func (in *Inbound) Run(ctx context.Context) error {
	if IsEvents(in.o.Bot) {
		for ctx.Err() == nil {
			if _, err := in.me(ctx); err == nil {
				break
			}
			im.Sleep(ctx, 5*time.Second)
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return im.Hold(ctx, im.HoldOptions{JS: in.o.JS, Key: im.ConnKey(Platform, in.o.Bot.ID), Owner: in.o.Owner, TTL: in.o.TTL, Log: in.log}, in.socket)
}

func (in *Inbound) me(ctx context.Context) (*identity, error) {
	if id := in.self.Load(); id != nil {
		return id, nil
	}
	r, err := in.api.AuthTestContext(ctx)
	if err != nil {
		return nil, classify("auth.test", err)
	}
	id := &identity{user: r.UserID, bot: r.BotID}
	in.self.Store(id)
	return id, nil
}

// socket runs Socket Mode until ctx ends or the connection fails for good. An envelope is
// acknowledged once its message is ingested (or dead-lettered); one that is not is left
// unacknowledged, and Slack delivers it again.
func (in *Inbound) socket(ctx context.Context) error {
	if _, err := in.me(ctx); err != nil {
		return err
	}
	sm := socketmode.New(in.api)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sm.RunContext(ctx) }()
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("slack: socket mode: %w", err)
		case ev := <-sm.Events:
			switch ev.Type {
			case socketmode.EventTypeConnected:
				in.log.Info("slack: socket mode connected")
				im.Connected(ctx, in.log)
			case socketmode.EventTypeInvalidAuth:
				in.log.Error("slack: socket mode: invalid app token")
			case socketmode.EventTypeEventsAPI:
				if ev.Request == nil {
					continue
				}
				err := in.payload(ctx, ev.Request.Payload)
				if err != nil && !errors.Is(err, events.ErrInvalid) {
					in.log.Error("slack: event not ingested; Slack will deliver it again", "err", err)
					continue
				}
				if err := sm.AckCtx(ctx, ev.Request.EnvelopeID, nil); err != nil {
					in.log.Warn("slack: ack", "err", err)
				}
			case socketmode.EventTypeInteractive:
				if ev.Request == nil {
					continue
				}
				if err := in.pressButton(ctx, ev.Request.Payload); err != nil {
					in.log.Error("slack: interaction not ingested", "err", err)
				}
				_ = sm.AckCtx(ctx, ev.Request.EnvelopeID, nil) // Slack does not deliver interactions again
			case socketmode.EventTypeSlashCommand:
				if ev.Request != nil {
					_ = sm.AckCtx(ctx, ev.Request.EnvelopeID, nil)
				}
			}
		}
	}
}

// Routes registers POST /slack/{bot} for the Events API bots.
func Routes(mux *http.ServeMux, bots map[string]*Inbound) {
	mux.HandleFunc("POST /slack/{bot}", func(w http.ResponseWriter, r *http.Request) {
		in, ok := bots[r.PathValue("bot")]
		if !ok || !IsEvents(in.o.Bot) {
			http.Error(w, "unknown bot", http.StatusNotFound)
			return
		}
		in.serveEvents(w, r)
	})
}

const maxEvent = 1 << 20

func (in *Inbound) serveEvents(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxEvent+1))
	if err != nil || len(body) > maxEvent {
		http.Error(w, "body unreadable or over 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	sv, err := slackapi.NewSecretsVerifier(r.Header, in.o.Bot.SigningSecret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		in.log.Warn("slack: events request with a bad signature", "remote", r.RemoteAddr, "err", err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/x-www-form-urlencoded" {
		// An interaction (a card's button pressed), posted to the same request URL.
		form, err := url.ParseQuery(string(body))
		if err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2500*time.Millisecond) // Slack waits 3 s
		defer cancel()
		if err := in.pressButton(ctx, []byte(form.Get("payload"))); err != nil {
			in.log.Error("slack: interaction not ingested", "err", err)
			http.Error(w, "not accepted", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	var outer struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &outer); err != nil {
		_ = in.deadLetter(r.Context(), fmt.Errorf("event is not JSON: %w", err), body)
		w.WriteHeader(http.StatusOK) // Slack would only send it again
		return
	}
	if outer.Type == "url_verification" {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, outer.Challenge)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2500*time.Millisecond) // Slack waits 3 s
	defer cancel()
	if err := in.payload(ctx, body); err != nil && !errors.Is(err, events.ErrInvalid) {
		in.log.Error("slack: event not ingested", "err", err)
		http.Error(w, "not accepted, retry later", http.StatusServiceUnavailable) // Slack retries
		return
	}
	w.WriteHeader(http.StatusOK)
}

// wireEvent is the part of an event_callback the adapter reads.
type wireEvent struct {
	Type  string `json:"type"`
	Event struct {
		Type        string     `json:"type"`
		Subtype     string     `json:"subtype"`
		User        string     `json:"user"`
		BotID       string     `json:"bot_id"`
		Text        string     `json:"text"`
		TS          string     `json:"ts"`
		ThreadTS    string     `json:"thread_ts"`
		Channel     string     `json:"channel"`
		ChannelType string     `json:"channel_type"`
		Files       []wireFile `json:"files"`
	} `json:"event"`
}

type wireFile struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	Mimetype           string `json:"mimetype"`
	URLPrivate         string `json:"url_private"`
	URLPrivateDownload string `json:"url_private_download"`
}

// payload ingests one Events API payload (event_callback with a message event; other
// events are skipped).
func (in *Inbound) payload(ctx context.Context, raw []byte) error {
	var ev wireEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return in.deadLetter(ctx, fmt.Errorf("event is not JSON: %w", err), raw)
	}
	e := ev.Event
	if ev.Type != "event_callback" || e.Type != "message" {
		return nil
	}
	if e.BotID != "" || (e.Subtype != "" && e.Subtype != "file_share" && e.Subtype != "thread_broadcast") {
		return nil // bots (this one included), edits, joins, deletions, ...
	}
	m, err := in.normalize(ctx, &ev)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return in.deadLetter(ctx, err, raw)
	}
	last := im.Ingest(ctx, in.o.Sink, m, 3, 300*time.Millisecond)
	if errors.Is(last, events.ErrInvalid) {
		return in.deadLetter(ctx, last, raw)
	}
	return last
}

func (in *Inbound) deadLetter(ctx context.Context, cause error, raw []byte) error {
	in.log.Warn("slack: event rejected", "err", cause)
	if in.o.JS != nil {
		if err := im.DeadLetter(ctx, in.o.JS, Platform+"/"+in.o.Bot.ID, events.DLQInvalid, cause, raw); err != nil {
			in.log.Error("slack: dead letter", "err", err)
		}
	}
	if errors.Is(cause, events.ErrInvalid) {
		return cause
	}
	return fmt.Errorf("%w: %v", events.ErrInvalid, cause)
}

func (in *Inbound) normalize(ctx context.Context, ev *wireEvent) (*events.IMMessage, error) {
	e := &ev.Event
	if e.Channel == "" || e.TS == "" {
		return nil, errors.New("message event has no channel or ts")
	}
	m := &events.IMMessage{Platform: Platform, Bot: in.o.Bot.ID, MessageID: MessageID(e.Channel, e.TS, e.ThreadTS),
		Sender: events.Sender{ID: e.User, Name: e.User}}
	if sec, frac, ok := strings.Cut(e.TS, "."); ok || sec != "" {
		s, _ := strconv.ParseInt(sec, 10, 64)
		ms, _ := strconv.ParseInt((frac + "000")[:3], 10, 64)
		m.Time = s*1000 + ms
	}
	switch e.ChannelType {
	case "im":
		m.Scene = events.Scene{Type: events.ScopePrivate, ID: e.Channel}
	case "channel", "group", "mpim", "":
		m.Scene = events.Scene{Type: events.ScopeGroup, ID: e.Channel}
	default:
		return nil, fmt.Errorf("channel_type %q is not im, channel, group or mpim", e.ChannelType)
	}
	self, _ := in.me(ctx) // nil when auth.test failed: the bot's mentions are then not recognised
	if e.ThreadTS != "" && e.ThreadTS != e.TS {
		m.Content = append(m.Content, events.ReplySeg(MessageID(e.Channel, e.ThreadTS, "")))
	}
	segs, mention := textSegments(e.Text, self)
	m.MentionsBot = mention
	m.Content = append(m.Content, segs...)
	for i, f := range e.Files {
		m.Content = append(m.Content, in.file(ctx, f, im.MediaName(Platform, in.o.Bot.ID, e.Channel+"-"+e.TS, i+1)))
	}
	return m, nil
}

func fileType(mime string) string {
	switch {
	case strings.HasPrefix(mime, "image/"):
		return events.SegImage
	case strings.HasPrefix(mime, "video/"):
		return events.SegVideo
	case strings.HasPrefix(mime, "audio/"):
		return events.SegAudio
	}
	return events.SegFile
}

// file stores a Slack file in the media store: url_private needs the bot token, sent only to
// Slack's file hosts or the configured apiBase (the library's rule), through the SSRF guard.
func (in *Inbound) file(ctx context.Context, f wireFile, name string) events.Segment {
	seg := events.Segment{Type: fileType(f.Mimetype), Data: map[string]any{"name": f.Name, "file": f.ID}}
	u := f.URLPrivateDownload
	if u == "" {
		u = f.URLPrivate
	}
	if in.o.Media == nil || u == "" {
		if u != "" {
			seg.Data["url"] = u
		}
		return seg
	}
	api := newAPI(in.o.Bot, in.o.Media.Client())
	var buf bytes.Buffer
	lw := &limitWriter{w: &buf, n: im.MaxMedia}
	if err := api.GetFileContext(ctx, u, lw); err != nil {
		seg.Data["error"] = "fetch media: " + err.Error()
		seg.Data["url"] = u
		return seg
	}
	size, ct, err := in.o.Media.Put(ctx, name, buf.Bytes(), f.Mimetype)
	if err != nil {
		seg.Data["error"] = err.Error()
		return seg
	}
	seg.Data["url"] = im.MediaScheme + name
	seg.Data["object"] = name
	seg.Data["size"] = size
	seg.Data["mimeType"] = ct
	seg.Data["sourceUrl"] = u
	return seg
}

type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, fmt.Errorf("over %d bytes", im.MaxMedia)
	}
	l.n -= len(p)
	return l.w.Write(p)
}

var mentionRe = regexp.MustCompile(`<@([UW][A-Z0-9]+)(?:\|([^>]*))?>`)

// textSegments splits Slack text at user mentions (<@U…>, <@U…|name>): the bot's own
// mention is dropped and reported, others become at segments. Slack's &amp; &lt; &gt;
// escapes are undone.
func textSegments(text string, self *identity) (events.Segments, bool) {
	if text == "" {
		return nil, false
	}
	var out events.Segments
	mention := false
	add := func(s string) {
		if s = html.UnescapeString(s); s != "" {
			out = append(out, events.TextSeg(s))
		}
	}
	pos := 0
	for _, loc := range mentionRe.FindAllStringSubmatchIndex(text, -1) {
		id := text[loc[2]:loc[3]]
		name := ""
		if loc[4] >= 0 {
			name = text[loc[4]:loc[5]]
		}
		before := text[pos:loc[0]]
		pos = loc[1]
		if self != nil && id == self.user {
			mention = true
			if len(out) == 0 && strings.TrimSpace(before) == "" {
				pos += len(text[pos:]) - len(strings.TrimLeft(text[pos:], " "))
				continue
			}
			add(before)
			continue
		}
		add(before)
		out = append(out, events.AtSeg(id, name))
	}
	add(text[pos:])
	return out, mention
}
