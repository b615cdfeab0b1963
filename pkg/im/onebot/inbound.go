package onebot

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Modes of a bot (config im.onebot.bots[].mode).
const (
	ModeWS        = "ws"         // forward WebSocket: agentbus dials the implementation
	ModeWSReverse = "ws-reverse" // reverse WebSocket: the implementation dials agentbus
	ModeHTTP      = "http"       // HTTP API + event POSTs
)

// rpcQueue is the queue group of the RPC relay: when two replicas hold reverse WebSockets of
// the same bot, either answers.
const rpcQueue = "onebot-rpc"

// InboundOptions configure an Inbound.
type InboundOptions struct {
	Bot   config.OneBotBot
	Sink  im.Sink
	Media *im.Media // nil: media stays as the implementation's URLs
	// NC serves the RPC relay for egress (ws and ws-reverse modes).
	NC *nats.Conn
	// JS holds the connection lease (ws mode) and receives dead letters.
	JS    jetstream.JetStream
	Owner string // this replica's id (lease owner)
	// Ledger records relayed sends (nil: none; see im.Ledger).
	Ledger *im.Ledger
	// TTL of the connection lease (default im.DefaultConnTTL).
	TTL time.Duration
	Log *slog.Logger
	// OnHeld is told when this replica starts and stops holding the forward connection.
	OnHeld func(bool)
}

// Inbound is the ingest half of one OneBot bot.
type Inbound struct {
	o      InboundOptions
	log    *slog.Logger
	selfID atomic.Value // string
	mu     sync.Mutex
	rev    map[*wsConn]*nats.Subscription // reverse connections and their RPC subscriptions
	// cursors are the backfill cursors of the WebSocket modes (nil without JS).
	cursors *im.Cursors
}

// NewInbound validates the bot's configuration.
func NewInbound(o InboundOptions) (*Inbound, error) {
	if err := Validate(o.Bot); err != nil {
		return nil, err
	}
	if o.Sink == nil {
		return nil, errors.New("onebot: InboundOptions.Sink is required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	in := &Inbound{o: o, log: o.Log.With("platform", Platform, "bot", o.Bot.ID), rev: map[*wsConn]*nats.Subscription{}}
	self := o.Bot.SelfID
	if self == "" {
		self = o.Bot.ID
	}
	in.selfID.Store(self)
	return in, nil
}

// Validate checks one bot's configuration.
func Validate(b config.OneBotBot) error {
	if b.ID == "" {
		return errors.New("onebot: a bot has no id")
	}
	if strings.ContainsAny(b.ID, ":/ ") {
		return fmt.Errorf("onebot: bot id %q must not contain ':', '/' or spaces", b.ID)
	}
	switch mode(b) {
	case ModeWS:
		if !strings.HasPrefix(b.APIBase, "ws://") && !strings.HasPrefix(b.APIBase, "wss://") {
			return fmt.Errorf("onebot: bot %s: mode ws needs apiBase ws://host:port (got %q)", b.ID, redact(b.APIBase))
		}
	case ModeHTTP:
		if !strings.HasPrefix(b.APIBase, "http://") && !strings.HasPrefix(b.APIBase, "https://") {
			return fmt.Errorf("onebot: bot %s: mode http needs apiBase http://host:port (got %q)", b.ID, redact(b.APIBase))
		}
	case ModeWSReverse:
	default:
		return fmt.Errorf("onebot: bot %s: mode %q must be ws, ws-reverse or http", b.ID, b.Mode)
	}
	return nil
}

func mode(b config.OneBotBot) string {
	if b.Mode == "" {
		return ModeWS
	}
	return b.Mode
}

// NeedsHTTP reports whether the bot is reached through agentbus's HTTP listener
// (ws-reverse and http modes).
func NeedsHTTP(b config.OneBotBot) bool { m := mode(b); return m == ModeWSReverse || m == ModeHTTP }

// Run runs the bot's inbound side until ctx ends: in ws mode it dials the implementation
// under the single-connection lease (im.Hold), reconnecting with backoff; in the other modes
// the HTTP handlers do the work and Run only waits.
func (in *Inbound) Run(ctx context.Context) error {
	if m := mode(in.o.Bot); (m == ModeWS || m == ModeWSReverse) && in.o.JS != nil {
		for in.cursors == nil {
			c, err := im.OpenCursors(ctx, in.o.JS, Platform, in.o.Bot.ID, in.log)
			if err == nil {
				in.mu.Lock()
				in.cursors = c
				in.mu.Unlock()
				break
			}
			in.log.Warn("onebot: backfill cursors not available yet", "err", err)
			if !im.Sleep(ctx, 2*time.Second) {
				return ctx.Err()
			}
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Add(1)
		go func() { defer wg.Done(); in.cursors.Run(ctx, 0) }()
	}
	if mode(in.o.Bot) != ModeWS {
		<-ctx.Done()
		return ctx.Err()
	}
	return im.Hold(ctx, im.HoldOptions{JS: in.o.JS, Key: im.ConnKey(Platform, in.o.Bot.ID), Owner: in.o.Owner,
		TTL: in.o.TTL, Log: in.log, OnState: in.o.OnHeld}, in.runForward)
}

// runForward holds one forward WebSocket until it fails or ctx ends.
func (in *Inbound) runForward(ctx context.Context) error {
	c, err := dial(ctx, in.o.Bot.APIBase, in.o.Bot.AccessToken)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	w := newWSConn(c)
	sub, err := in.serveRPC(w)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	in.log.Info("onebot: connected", "apiBase", redact(in.o.Bot.APIBase))
	im.Connected(ctx, in.log)
	err = in.serveEvents(ctx, w, "ws")
	if ctx.Err() != nil {
		_ = c.Close(websocket.StatusNormalClosure, "bye")
	}
	return err
}

// Routes registers the HTTP endpoints of ws-reverse and http bots:
//
//	GET  /onebot/{bot}/ws   reverse WebSocket (Authorization: Bearer <accessToken> or ?access_token=)
//	POST /onebot/{bot}      event POST (X-Signature: sha1=<HMAC-SHA1 of the body with secret>)
func Routes(mux *http.ServeMux, bots map[string]*Inbound) {
	mux.HandleFunc("GET /onebot/{bot}/ws", func(w http.ResponseWriter, r *http.Request) {
		in, ok := bots[r.PathValue("bot")]
		if !ok || mode(in.o.Bot) != ModeWSReverse {
			http.Error(w, "unknown bot", http.StatusNotFound)
			return
		}
		in.serveReverse(w, r)
	})
	mux.HandleFunc("POST /onebot/{bot}", func(w http.ResponseWriter, r *http.Request) {
		in, ok := bots[r.PathValue("bot")]
		if !ok || mode(in.o.Bot) != ModeHTTP {
			http.Error(w, "unknown bot", http.StatusNotFound)
			return
		}
		in.servePost(w, r)
	})
}

// authorized checks the access token of a request to agentbus's listener. Without a token it
// refuses, fail closed, what config validation already refuses to start (ws-reverse without
// accessToken); an http bot with only a secret is authorized by its X-Signature (servePost).
func (in *Inbound) authorized(r *http.Request) bool {
	tok := in.o.Bot.AccessToken
	if tok == "" {
		return mode(in.o.Bot) == ModeHTTP && in.o.Bot.Secret != ""
	}
	got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if got == "" {
		got = strings.TrimPrefix(r.Header.Get("Authorization"), "Token ")
	}
	if got == "" {
		got = r.URL.Query().Get("access_token")
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1
}

func (in *Inbound) serveReverse(w http.ResponseWriter, r *http.Request) {
	if !in.authorized(r) {
		in.log.Warn("onebot: reverse WebSocket with a wrong access token", "remote", r.RemoteAddr)
		http.Error(w, "wrong access token", http.StatusUnauthorized)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		in.log.Warn("onebot: accept reverse WebSocket", "err", err)
		return
	}
	defer c.CloseNow()
	conn := newWSConn(c)
	sub, err := in.serveRPC(conn)
	if err != nil {
		in.log.Error("onebot: serve API relay", "err", err)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	in.log.Info("onebot: reverse WebSocket connected", "remote", r.RemoteAddr)
	err = in.serveEvents(r.Context(), conn, "ws-reverse")
	in.log.Info("onebot: reverse WebSocket closed", "err", err)
}

const maxPost = 4 << 20

func (in *Inbound) servePost(w http.ResponseWriter, r *http.Request) {
	if !in.authorized(r) {
		http.Error(w, "wrong access token", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPost+1))
	if err != nil || len(body) > maxPost {
		http.Error(w, "body unreadable or over 4 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	if s := in.o.Bot.Secret; s != "" {
		mac := hmac.New(sha1.New, []byte(s))
		mac.Write(body)
		want := "sha1=" + hex.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(r.Header.Get("X-Signature")), []byte(want)) {
			in.log.Warn("onebot: event POST with a wrong signature", "remote", r.RemoteAddr)
			http.Error(w, "wrong signature", http.StatusUnauthorized)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	if err := in.handleErr(ctx, body, "http"); err != nil && !errors.Is(err, events.ErrInvalid) {
		// The bus did not take it: a 5xx makes the implementation's POST fail visibly.
		in.log.Error("onebot: event POST not ingested", "status", http.StatusServiceUnavailable, "err", err)
		http.Error(w, "not accepted, retry later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent) // no quick operation
}

// serveEvents reads w's events until it ends. A backfill runs first (beside the read loop,
// which answers its API calls); events that arrive meanwhile queue behind it, so each scene's
// messages reach IM_IN in order.
func (in *Inbound) serveEvents(ctx context.Context, w *wsConn, via string) error {
	in.mu.Lock()
	cursors := in.cursors
	in.mu.Unlock()
	if cursors == nil {
		return w.readLoop(ctx, func(b []byte) { in.handle(ctx, b, via) })
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan []byte, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.backfill(ctx, w, via)
		for b := range queue { // after the read loop ends: what is queued still goes to the bus
			in.handle(ctx, b, via)
		}
	}()
	err := w.readLoop(ctx, func(b []byte) {
		select {
		case queue <- b:
		case <-ctx.Done():
		}
	})
	close(queue) // readLoop has returned: no more sends
	<-done
	return err
}

// handle ingests one event frame, logging failures (WebSocket: there is nobody to answer).
func (in *Inbound) handle(ctx context.Context, b []byte, via string) {
	if err := in.handleErr(ctx, b, via); err != nil && !errors.Is(err, events.ErrInvalid) {
		in.log.Error("onebot: event not ingested", "via", via, "err", err)
	}
}

// handleErr normalizes and ingests one event. Messages are retried a few times when the bus
// does not take them; an event that cannot be normalized is dead-lettered (and the error
// wraps events.ErrInvalid).
func (in *Inbound) handleErr(ctx context.Context, b []byte, via string) error {
	var ev event
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&ev); err != nil {
		return in.deadLetter(ctx, via, fmt.Errorf("event is not JSON: %w", err), b)
	}
	if s := ev.SelfID.String(); s != "" && s != "0" {
		in.selfID.Store(s)
	}
	if ev.PostType != "message" {
		return nil // meta events (heartbeat, lifecycle), notices, requests: not messages
	}
	m, err := in.normalize(ctx, &ev)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return in.deadLetter(ctx, via, err, b)
	}
	last := im.Ingest(ctx, in.o.Sink, m, 4, 500*time.Millisecond)
	if errors.Is(last, events.ErrInvalid) {
		return in.deadLetter(ctx, via, last, b)
	}
	if last == nil {
		in.mu.Lock()
		cursors := in.cursors
		in.mu.Unlock()
		cursors.Note(sceneKey(m.Scene.Type, m.Scene.ID), im.Cursor{Scope: m.Scene.Type, ID: m.MessageID, Time: m.Time})
	}
	return last
}

func (in *Inbound) deadLetter(ctx context.Context, via string, cause error, raw []byte) error {
	in.log.Warn("onebot: event rejected", "via", via, "err", cause)
	if in.o.JS != nil {
		if err := im.DeadLetter(ctx, in.o.JS, Platform+"/"+in.o.Bot.ID+" "+via, events.DLQInvalid, cause, raw); err != nil {
			in.log.Error("onebot: dead letter", "err", err)
		}
	}
	if errors.Is(cause, events.ErrInvalid) {
		return cause
	}
	return fmt.Errorf("%w: %v", events.ErrInvalid, cause)
}

// normalize turns a message event into the bus's IMMessage: scene, sender with the group
// role (owner -> group_owner, admin -> group_admin), segments in MessageElement form, media
// stored in the media object store, MentionsBot when the bot's QQ is @-ed.
func (in *Inbound) normalize(ctx context.Context, ev *event) (*events.IMMessage, error) {
	m := &events.IMMessage{Platform: Platform, Bot: in.o.Bot.ID, MessageID: ev.MessageID.String(), Time: ev.Time * 1000}
	user := ev.UserID.String()
	if user == "" {
		user = ev.Sender.UserID.String()
	}
	m.Sender = events.Sender{ID: user, Name: ev.Sender.Card}
	if m.Sender.Name == "" {
		m.Sender.Name = ev.Sender.Nickname
	}
	switch ev.MessageType {
	case "group":
		m.Scene = events.Scene{Type: "group", ID: ev.GroupID.String()}
		switch ev.Sender.Role {
		case "owner":
			m.Sender.Roles = []string{"group_owner"}
		case "admin":
			m.Sender.Roles = []string{"group_admin"}
		}
	case "private":
		m.Scene = events.Scene{Type: "private", ID: user}
	default:
		return nil, fmt.Errorf("message_type %q is neither group nor private", ev.MessageType)
	}
	segs, err := parseMessage(ev.Message)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 && ev.RawMessage != "" {
		segs = parseCQ(ev.RawMessage)
	}
	self, _ := in.selfID.Load().(string)
	for i, s := range segs {
		seg, mention := in.inSegment(ctx, m, i, s, self)
		if mention {
			m.MentionsBot = true
		}
		if seg.Type != "" {
			m.Content = append(m.Content, seg)
		}
	}
	return m, nil
}

// inSegment maps one OneBot segment to the bus form.
func (in *Inbound) inSegment(ctx context.Context, m *events.IMMessage, i int, s segment, self string) (events.Segment, bool) {
	switch s.Type {
	case "text":
		return events.TextSeg(s.str("text")), false
	case "at":
		qq := s.str("qq")
		if qq == self && self != "" {
			return events.SelfAtSeg(qq, s.str("name")), true // "[at bot] /reset" is the command /reset
		}
		return events.AtSeg(qq, s.str("name")), false
	case "reply":
		return events.ReplySeg(s.str("id")), false
	case "face":
		return events.Segment{Type: events.SegFace, Data: map[string]any{"id": s.str("id")}}, false
	case "image", "record", "video", "file":
		typ := s.Type
		d := map[string]any{}
		for _, k := range []string{"file", "name", "summary", "file_size", "file_id"} {
			if v := s.str(k); v != "" {
				d[k] = v
			}
		}
		seg := events.Segment{Type: typ, Data: d}
		u := s.str("url")
		if u == "" && (strings.HasPrefix(s.str("file"), "http://") || strings.HasPrefix(s.str("file"), "https://")) {
			u = s.str("file")
		}
		if u == "" {
			if d["file"] == nil {
				d["file"] = "unknown"
			}
			return seg, false
		}
		if in.o.Media == nil {
			d["url"] = u
			return seg, false
		}
		return in.o.Media.StoreSegment(ctx, seg, u, im.MediaName(Platform, in.o.Bot.ID, m.MessageID, i)), false
	}
	// Other segment types (json cards, poke, forward, ...) are carried along as they are.
	d := make(map[string]any, len(s.Data))
	for k, v := range s.Data {
		d[k] = v
	}
	return events.Segment{Type: s.Type, Data: d}, false
}
