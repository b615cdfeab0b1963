package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/format"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// syncTimeout is /sync's long-poll timeout.
const syncTimeout = 25 * time.Second

// timelineLimit is how many timeline events per room one /sync returns at most; a room with
// more since the last sync comes back "limited" and the gap is fetched with /messages.
const timelineLimit = 100

// InboundOptions configure an Inbound.
type InboundOptions struct {
	Bot   config.MatrixBot
	Sink  im.Sink
	Media *im.Media // nil: attachments stay mxc:// references
	// JS holds the sync lease and the since token, and receives dead letters.
	JS    jetstream.JetStream
	Owner string
	TTL   time.Duration
	// HTTP is the API client (nil: a 60 s client; a long poll lasts syncTimeout).
	HTTP *http.Client
	Log  *slog.Logger
}

// Inbound is the ingest half of one Matrix bot.
type Inbound struct {
	o    InboundOptions
	c    *mautrix.Client
	mc   *mautrix.Client // media downloads, through the SSRF guard (nil without Media)
	log  *slog.Logger
	self id.UserID

	mu       sync.Mutex
	direct   map[id.RoomID]bool
	members  map[id.RoomID]map[id.UserID]string // joined members -> display name, once loaded
	joinTry  map[id.RoomID]time.Time            // no join attempt before this
	warned   map[id.RoomID]bool
	selfName string
}

// NewInbound validates the bot's configuration.
func NewInbound(o InboundOptions) (*Inbound, error) {
	if err := Validate(o.Bot); err != nil {
		return nil, err
	}
	if o.Sink == nil {
		return nil, errors.New("matrix: InboundOptions.Sink is required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: syncTimeout + 30*time.Second}
	}
	c, err := newClient(o.Bot, hc)
	if err != nil {
		return nil, err
	}
	in := &Inbound{o: o, c: c, self: id.UserID(o.Bot.UserID), log: o.Log.With("platform", Platform, "bot", o.Bot.ID)}
	if o.Media != nil {
		hs, _ := url.Parse(o.Bot.Homeserver) // checked by Validate
		mc := &http.Client{Timeout: 2 * time.Minute,
			Transport: pinned{scheme: hs.Scheme, host: hs.Host, direct: http.DefaultTransport, guarded: o.Media.Client().Transport}}
		if in.mc, err = newClient(o.Bot, mc); err != nil {
			return nil, err
		}
	}
	in.reset()
	return in, nil
}

func (in *Inbound) reset() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.direct = map[id.RoomID]bool{}
	in.members = map[id.RoomID]map[id.UserID]string{}
	in.joinTry = map[id.RoomID]time.Time{}
	in.warned = map[id.RoomID]bool{}
}

// Run syncs under the single-connection lease until ctx ends. It returns ctx's error.
func (in *Inbound) Run(ctx context.Context) error {
	return im.Hold(ctx, im.HoldOptions{JS: in.o.JS, Key: im.ConnKey(Platform, in.o.Bot.ID), Owner: in.o.Owner, TTL: in.o.TTL, Log: in.log}, in.sync)
}

var (
	msgTypes = []event.Type{event.EventMessage, event.StateMember, event.EventEncrypted}
	// liveFilter is the filter of the sync loop; firstFilter that of a bot's first sync,
	// which only learns the rooms (their history is not answered).
	liveFilter = &mautrix.Filter{
		AccountData: &mautrix.FilterPart{Types: []event.Type{event.AccountDataDirectChats}},
		Presence:    &mautrix.FilterPart{NotTypes: []event.Type{{Type: "*"}}},
		Room: &mautrix.RoomFilter{
			Timeline:    &mautrix.FilterPart{Limit: timelineLimit, Types: msgTypes},
			State:       &mautrix.FilterPart{Types: []event.Type{event.StateMember}, LazyLoadMembers: true},
			Ephemeral:   &mautrix.FilterPart{NotTypes: []event.Type{{Type: "*"}}},
			AccountData: &mautrix.FilterPart{NotTypes: []event.Type{{Type: "*"}}},
		},
	}
	firstFilter = &mautrix.Filter{
		AccountData: liveFilter.AccountData,
		Presence:    liveFilter.Presence,
		Room: &mautrix.RoomFilter{
			Timeline:    &mautrix.FilterPart{Limit: 1, Types: msgTypes},
			State:       liveFilter.Room.State,
			Ephemeral:   liveFilter.Room.Ephemeral,
			AccountData: liveFilter.Room.AccountData,
		},
	}
)

// sync runs the /sync loop while this replica holds the connection. It resumes from the
// stored since token, ingests every batch and only then stores the batch's next_batch.
func (in *Inbound) sync(ctx context.Context) error {
	in.reset() // room knowledge of an earlier holding may be stale
	store, err := openSince(ctx, in.o.JS, in.o.Bot.ID)
	if err != nil {
		return err
	}
	who, err := in.c.Whoami(ctx)
	if err != nil {
		return classify("whoami", err)
	}
	if who.UserID != in.self {
		in.log.Error("matrix: the access token belongs to another user", "tokenUser", who.UserID, "userId", in.self)
		return fmt.Errorf("matrix: bot %s: the access token is %s's, not %s's", in.o.Bot.ID, who.UserID, in.self)
	}
	in.loadDirect(ctx)
	since, err := store.load(ctx)
	if err != nil {
		return err
	}
	live, err := in.c.CreateFilter(ctx, liveFilter)
	if err != nil {
		return classify("filter", err)
	}
	first := since == ""
	filterID := live.FilterID
	startAfresh := func() error {
		f, err := in.c.CreateFilter(ctx, firstFilter)
		if err != nil {
			return classify("filter", err)
		}
		since, first, filterID = "", true, f.FilterID
		return nil
	}
	if first {
		if err := startAfresh(); err != nil {
			return err
		}
	}
	failures := 0
	for ctx.Err() == nil {
		timeout := int(syncTimeout.Milliseconds())
		if first {
			timeout = 0
		}
		resp, err := in.c.SyncRequest(ctx, timeout, since, filterID, false, "")
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			err = classify("sync", err)
			var e *im.Error
			if errors.As(err, &e) && e.Perm && e.Status == http.StatusBadRequest && since != "" {
				// The server no longer knows the stored token (its database was reset):
				// start afresh instead of asking with it forever.
				in.log.Error("matrix: the stored since token was refused; syncing afresh (what came meanwhile is not answered)", "err", err)
				if err := startAfresh(); err != nil {
					return err
				}
				continue
			}
			if errors.As(err, &e) && e.Perm {
				in.log.Error("matrix: sync refused", "err", err)
				return err
			}
			failures++
			wait := time.Duration(failures) * time.Second
			if errors.As(err, &e) && e.RetryAfter > 0 {
				wait = e.RetryAfter
			}
			if failures > 5 {
				return err // let Hold release the connection; any replica retries
			}
			in.log.Warn("matrix: sync failed; retrying", "err", err, "in", wait)
			if !im.Sleep(ctx, min(wait, 30*time.Second)) {
				return ctx.Err()
			}
			continue
		}
		failures = 0
		if err := in.batch(ctx, resp, first, since); err != nil {
			return err // not stored: the next holder syncs the batch again
		}
		if err := store.save(ctx, resp.NextBatch); err != nil {
			return err
		}
		since = resp.NextBatch
		if first {
			first, filterID = false, live.FilterID
			in.log.Info("matrix: first sync done; answering from now on")
			im.Connected(ctx, in.log)
		}
	}
	return ctx.Err()
}

// batch handles one /sync response: m.direct, invites, membership, messages. An error
// means a message could not be ingested (the batch must be synced again).
func (in *Inbound) batch(ctx context.Context, resp *mautrix.RespSync, first bool, since string) error {
	for _, evt := range resp.AccountData.Events {
		if evt.Type == event.AccountDataDirectChats {
			in.setDirect(evt.Content.VeryRaw)
		}
	}
	for roomID, inv := range resp.Rooms.Invite {
		in.invited(ctx, roomID, inv)
	}
	for roomID, room := range resp.Rooms.Join {
		for _, evt := range room.State.Events {
			in.memberEvent(roomID, evt)
		}
		// A room the bot joined in this batch comes with history from before the join:
		// only a direct chat's is answered (written to the bot while it was joining).
		joinedAt := in.ownJoin(room.Timeline.Events)
		in.mu.Lock()
		skipBefore := joinedAt >= 0 && !in.direct[roomID]
		in.mu.Unlock()
		timeline := room.Timeline.Events
		if room.Timeline.Limited && !first && joinedAt < 0 && since != "" {
			// More happened since the last sync than one sync returns: fetch the gap.
			older, err := in.backfill(ctx, roomID, room.Timeline.PrevBatch, since)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				in.log.Warn("matrix: the gap before this sync could not be fetched; its messages are not answered", "room", roomID, "err", err)
			}
			timeline = append(older, timeline...)
		}
		for i, evt := range timeline {
			evt.RoomID = roomID
			if evt.Type == event.StateMember {
				in.memberEvent(roomID, evt)
				continue
			}
			if first || (skipBefore && i < joinedAt) { // (no backfill happens when the bot joined)
				continue
			}
			if err := in.message(ctx, evt); err != nil && !errors.Is(err, events.ErrInvalid) {
				return err
			}
		}
	}
	for roomID := range resp.Rooms.Leave {
		in.mu.Lock()
		delete(in.members, roomID)
		in.mu.Unlock()
	}
	return nil
}

// maxBackfill bounds the events fetched to fill one room's gap.
const maxBackfill = 1000

// backfill returns the room's events between the since token and prevBatch (the start of a
// limited timeline), oldest first, with /messages?dir=b&from=prevBatch&to=since.
func (in *Inbound) backfill(ctx context.Context, room id.RoomID, prevBatch, since string) ([]*event.Event, error) {
	var got []*event.Event
	from := prevBatch
	for from != "" && len(got) < maxBackfill {
		resp, err := in.c.Messages(ctx, room, from, since, mautrix.DirectionBackward, &mautrix.FilterPart{Types: msgTypes}, timelineLimit)
		if err != nil {
			return reverse(got), classify("messages", err)
		}
		got = append(got, resp.Chunk...)
		if len(resp.Chunk) == 0 || resp.End == "" || resp.End == from {
			break
		}
		from = resp.End
	}
	if len(got) >= maxBackfill {
		in.log.Warn("matrix: gap longer than the backfill bound; the oldest messages are not answered", "room", room, "fetched", len(got))
	}
	in.log.Info("matrix: fetched the messages between two syncs", "room", room, "events", len(got))
	return reverse(got), nil
}

func reverse(evts []*event.Event) []*event.Event {
	out := make([]*event.Event, len(evts))
	for i, e := range evts {
		out[len(evts)-1-i] = e
	}
	return out
}

// ownJoin is the index of the bot's own join in a timeline, -1 when it is not there.
func (in *Inbound) ownJoin(evts []*event.Event) int {
	for i, evt := range evts {
		if evt.Type != event.StateMember || evt.GetStateKey() != in.self.String() {
			continue
		}
		_ = evt.Content.ParseRaw(evt.Type)
		if evt.Content.AsMember().Membership != event.MembershipJoin {
			continue
		}
		if prev := evt.Unsigned.PrevContent; prev != nil { // a profile change is no join
			_ = prev.ParseRaw(evt.Type)
			if prev.AsMember().Membership == event.MembershipJoin {
				continue
			}
		}
		return i
	}
	return -1
}

// loadDirect reads the bot's m.direct account data (the rooms a holder before this one
// marked as direct).
func (in *Inbound) loadDirect(ctx context.Context) {
	var m map[id.UserID][]id.RoomID
	if err := in.c.GetAccountData(ctx, event.AccountDataDirectChats.Type, &m); err != nil {
		if errCode(err) != "M_NOT_FOUND" {
			in.log.Debug("matrix: read m.direct", "err", classify("accountData", err))
		}
		return
	}
	b, _ := json.Marshal(m)
	in.setDirect(b)
}

func (in *Inbound) setDirect(raw []byte) {
	var m map[id.UserID][]id.RoomID
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, rooms := range m {
		for _, r := range rooms {
			in.direct[r] = true
		}
	}
}

// invited joins a room the bot is invited to (autoJoin); an is_direct invite also marks the
// room direct in the bot's m.direct, so every later holder knows it.
func (in *Inbound) invited(ctx context.Context, roomID id.RoomID, inv *mautrix.SyncInvitedRoom) {
	var inviter id.UserID
	isDirect := false
	for _, evt := range inv.State.Events {
		if evt.Type != event.StateMember || evt.GetStateKey() != in.self.String() {
			continue
		}
		_ = evt.Content.ParseRaw(evt.Type)
		if m := evt.Content.AsMember(); m.Membership == event.MembershipInvite {
			inviter, isDirect = evt.Sender, m.IsDirect
		}
	}
	if !autoJoin(in.o.Bot) {
		return
	}
	in.mu.Lock()
	next, tried := in.joinTry[roomID]
	if tried && time.Now().Before(next) {
		in.mu.Unlock()
		return
	}
	in.joinTry[roomID] = time.Now().Add(5 * time.Minute)
	in.mu.Unlock()
	if _, err := in.c.JoinRoomByID(ctx, roomID); err != nil {
		err = classify("join", err)
		in.log.Warn("matrix: join on invite", "room", roomID, "inviter", inviter, "err", err)
		// A refusal is tried again in 5 minutes; a rate limit or an outage much sooner.
		var e *im.Error
		if !im.IsPermanent(err) {
			wait := 2 * time.Second
			if errors.As(err, &e) && e.RetryAfter > wait {
				wait = e.RetryAfter
			}
			in.mu.Lock()
			in.joinTry[roomID] = time.Now().Add(wait)
			in.mu.Unlock()
		}
		return
	}
	in.log.Info("matrix: joined on invite", "room", roomID, "inviter", inviter, "direct", isDirect)
	if isDirect && inviter != "" {
		in.markDirect(ctx, inviter, roomID)
	}
}

func (in *Inbound) markDirect(ctx context.Context, user id.UserID, roomID id.RoomID) {
	in.mu.Lock()
	in.direct[roomID] = true
	in.mu.Unlock()
	m := map[id.UserID][]id.RoomID{}
	if err := in.c.GetAccountData(ctx, event.AccountDataDirectChats.Type, &m); err != nil && errCode(err) != "M_NOT_FOUND" {
		in.log.Debug("matrix: read m.direct", "err", classify("accountData", err))
		return
	}
	for _, r := range m[user] {
		if r == roomID {
			return
		}
	}
	m[user] = append(m[user], roomID)
	if err := in.c.SetAccountData(ctx, event.AccountDataDirectChats.Type, m); err != nil {
		in.log.Debug("matrix: write m.direct", "err", classify("accountData", err))
	}
}

// memberEvent keeps a loaded member list current.
func (in *Inbound) memberEvent(roomID id.RoomID, evt *event.Event) {
	if evt.Type != event.StateMember || evt.StateKey == nil {
		return
	}
	_ = evt.Content.ParseRaw(evt.Type)
	m := evt.Content.AsMember()
	user := id.UserID(*evt.StateKey)
	in.mu.Lock()
	defer in.mu.Unlock()
	if user == in.self && m.Displayname != "" {
		in.selfName = m.Displayname
	}
	list, ok := in.members[roomID]
	if !ok {
		return
	}
	if m.Membership == event.MembershipJoin {
		list[user] = m.Displayname
	} else {
		delete(list, user)
	}
}

// roomMembers returns the room's joined members (loaded once, then kept current from
// membership events).
func (in *Inbound) roomMembers(ctx context.Context, roomID id.RoomID) map[id.UserID]string {
	in.mu.Lock()
	list, ok := in.members[roomID]
	in.mu.Unlock()
	if ok {
		return list
	}
	resp, err := in.c.JoinedMembers(ctx, roomID)
	if err != nil {
		in.log.Debug("matrix: joined members", "room", roomID, "err", classify("members", err))
		return nil
	}
	list = map[id.UserID]string{}
	for u, m := range resp.Joined {
		list[u] = m.DisplayName
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.members[roomID] = list
	if n := list[in.self]; n != "" {
		in.selfName = n
	}
	return list
}

// message ingests one timeline event of a joined room.
func (in *Inbound) message(ctx context.Context, evt *event.Event) error {
	if evt.Sender == in.self {
		return nil
	}
	if evt.Type == event.EventEncrypted {
		in.mu.Lock()
		warned := in.warned[evt.RoomID]
		in.warned[evt.RoomID] = true
		in.mu.Unlock()
		if !warned {
			in.log.Warn("matrix: encrypted room: messages cannot be read (no end-to-end encryption support)", "room", evt.RoomID)
		}
		return nil
	}
	if evt.Type != event.EventMessage {
		return nil
	}
	if err := evt.Content.ParseRaw(evt.Type); err != nil && !errors.Is(err, event.ErrContentAlreadyParsed) {
		return in.deadLetter(ctx, fmt.Errorf("event %s content: %w", evt.ID, err), evt)
	}
	msg := evt.Content.AsMessage()
	if msg.MsgType == "" && msg.Body == "" {
		return nil // redacted
	}
	if msg.RelatesTo != nil && msg.RelatesTo.Type == event.RelReplace {
		return nil // an edit of an earlier message: not a new message
	}
	if msg.MsgType == event.MsgNotice {
		return nil // notices are what bots send; answering them makes bots talk to each other
	}
	m, err := in.normalize(ctx, evt, msg)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return in.deadLetter(ctx, err, evt)
	}
	last := im.Ingest(ctx, in.o.Sink, m, 4, 500*time.Millisecond)
	if errors.Is(last, events.ErrInvalid) {
		return in.deadLetter(ctx, last, evt)
	}
	return last
}

func (in *Inbound) deadLetter(ctx context.Context, cause error, evt *event.Event) error {
	in.log.Warn("matrix: event rejected", "event", evt.ID, "room", evt.RoomID, "err", cause)
	if in.o.JS != nil {
		raw, _ := json.Marshal(evt)
		if err := im.DeadLetter(ctx, in.o.JS, Platform+"/"+in.o.Bot.ID, events.DLQInvalid, cause, raw); err != nil {
			in.log.Error("matrix: dead letter", "err", err)
		}
	}
	if errors.Is(cause, events.ErrInvalid) {
		return cause
	}
	return fmt.Errorf("%w: %v", events.ErrInvalid, cause)
}

// normalize maps a room message to the bus's IMMessage.
func (in *Inbound) normalize(ctx context.Context, evt *event.Event, msg *event.MessageEventContent) (*events.IMMessage, error) {
	if evt.ID == "" || evt.RoomID == "" {
		return nil, errors.New("event has no event_id or room")
	}
	members := in.roomMembers(ctx, evt.RoomID)
	in.mu.Lock()
	direct := in.direct[evt.RoomID]
	selfName := in.selfName
	in.mu.Unlock()
	m := &events.IMMessage{Platform: Platform, Bot: in.o.Bot.ID, MessageID: evt.ID.String(), Time: evt.Timestamp,
		Sender: events.Sender{ID: evt.Sender.String(), Name: members[evt.Sender]}}
	if m.Sender.Name == "" {
		m.Sender.Name = evt.Sender.Localpart()
	}
	if direct || len(members) == 2 {
		m.Scene = events.Scene{Type: "private", ID: evt.RoomID.String()}
	} else {
		m.Scene = events.Scene{Type: "group", ID: evt.RoomID.String()}
	}
	replyTo := msg.RelatesTo.GetReplyTo()
	if replyTo != "" {
		m.Content = append(m.Content, events.ReplySeg(replyTo.String()))
	}
	switch msg.MsgType {
	case event.MsgImage, event.MsgAudio, event.MsgVideo, event.MsgFile:
		if caption := msg.GetCaption(); caption != "" {
			m.Content = append(m.Content, events.TextSeg(caption))
		}
		m.Content = append(m.Content, in.media(ctx, evt, msg))
	default:
		segs, pill := textSegments(msg, replyTo != "", in.self)
		if msg.Mentions == nil { // a client that sets m.mentions says whom it addresses itself
			segs = leadingMention(segs, in.self, selfName)
		}
		if msg.MsgType == event.MsgEmote {
			segs = append(events.Segments{events.TextSeg("* " + m.Sender.Name + " ")}, segs...)
		}
		if msg.MsgType == event.MsgLocation && msg.GeoURI != "" {
			segs = append(segs, events.TextSeg(" ("+msg.GeoURI+")"))
		}
		m.Content = append(m.Content, segs...)
		m.MentionsBot = mentions(msg, pill, in.self, selfName)
	}
	if msg.Mentions != nil && msg.MsgType.IsMedia() {
		m.MentionsBot = mentions(msg, false, in.self, selfName)
	}
	return m, nil
}

// mentions reports whether the message addresses the bot: m.mentions when the sender's
// client sets it (then nothing else counts), else a pill to the bot, its user id or its
// display name in the body.
func mentions(msg *event.MessageEventContent, pill bool, self id.UserID, selfName string) bool {
	if msg.Mentions != nil {
		for _, u := range msg.Mentions.UserIDs {
			if u == self {
				return true
			}
		}
		return false
	}
	if pill {
		return true
	}
	body := strings.ToLower(msg.Body)
	if strings.Contains(body, strings.ToLower(self.String())) {
		return true
	}
	return selfName != "" && strings.Contains(body, strings.ToLower(selfName))
}

// leadingMention turns the bot's mention typed as text at the start of a message, as clients
// without pills write it ("Bot: /reset", "@bot:example.org /reset"), into a mention of the bot
// (events.SelfAtSeg), so that what follows is read as if the bot had been @-ed with a pill.
func leadingMention(segs events.Segments, self id.UserID, selfName string) events.Segments {
	i := slices.IndexFunc(segs, func(s events.Segment) bool { return s.Type != events.SegReply })
	if i < 0 || segs[i].Type != events.SegText || self == "" {
		return segs
	}
	text := segs[i].Str("text")
	for _, n := range []string{self.String(), selfName} {
		if n == "" || len(text) <= len(n) || !strings.EqualFold(text[:len(n)], n) {
			continue
		}
		rest := text[len(n):]
		if r := rest[0]; r != ':' && r != ',' && r != ' ' {
			continue // "Botany is ..." does not address "Bot"
		}
		rest = strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(rest, ":"), ","), " ")
		out := append(events.Segments{}, segs[:i]...)
		out = append(out, events.SelfAtSeg(self.String(), selfName), events.TextSeg(rest))
		return append(out, segs[i+1:]...)
	}
	return segs
}

// Pills are marked in the text parsed from formatted_body with private-use runes, then cut
// into at segments: pillOpen mxid pillSep display name pillClose.
const (
	pillOpen  = "\uE000"
	pillSep   = "\uE001"
	pillClose = "\uE002"
)

var pillParser = &format.HTMLParser{
	TabsToSpaces: 4, Newline: "\n", HorizontalLine: "\n---\n",
	PillConverter: func(displayname, mxid, eventID string, ctx format.Context) string {
		if strings.HasPrefix(mxid, "@") && eventID == "" {
			return pillOpen + mxid + pillSep + displayname + pillClose
		}
		return format.DefaultPillConverter(displayname, mxid, eventID, ctx)
	},
}

// textSegments turns a text message into text and at segments (pills in formatted_body
// become at segments); pill reports whether one of them is the bot. A reply's fallback
// quote is dropped.
func textSegments(msg *event.MessageEventContent, reply bool, self id.UserID) (events.Segments, bool) {
	text := msg.Body
	if msg.Format == event.FormatHTML && msg.FormattedBody != "" {
		h := msg.FormattedBody
		if reply {
			h = event.TrimReplyFallbackHTML(h)
		}
		text = pillParser.Parse(h, format.NewContext(context.Background()))
	} else if reply {
		text = event.TrimReplyFallbackText(text)
	}
	var out events.Segments
	pill := false
	for text != "" {
		i := strings.Index(text, pillOpen)
		if i < 0 {
			out = append(out, events.TextSeg(text))
			break
		}
		j := strings.Index(text[i:], pillClose)
		if j < 0 {
			out = append(out, events.TextSeg(text))
			break
		}
		if i > 0 {
			out = append(out, events.TextSeg(text[:i]))
		}
		mxid, name, _ := strings.Cut(text[i+len(pillOpen):i+j], pillSep)
		if id.UserID(mxid) == self {
			out = append(out, events.SelfAtSeg(mxid, name))
			pill = true
		} else {
			out = append(out, events.AtSeg(mxid, name))
		}
		text = text[i+j+len(pillClose):]
	}
	if len(out) == 0 {
		out = events.Segments{events.TextSeg("")}
	}
	return out, pill
}

// media turns a media message into a media segment stored in the media store (a download
// that fails leaves the mxc:// reference with data.error, so the message still gets through).
func (in *Inbound) media(ctx context.Context, evt *event.Event, msg *event.MessageEventContent) events.Segment {
	typ := events.SegFile
	switch msg.MsgType {
	case event.MsgImage:
		typ = events.SegImage
	case event.MsgAudio:
		typ = events.SegAudio
	case event.MsgVideo:
		typ = events.SegVideo
	}
	d := map[string]any{"url": string(msg.URL)}
	if name := msg.GetFileName(); name != "" {
		d["name"] = name
	}
	if info := msg.Info; info != nil {
		if info.MimeType != "" {
			d["mimeType"] = info.MimeType
		}
		if info.Size > 0 {
			d["size"] = info.Size
		}
	}
	seg := events.Segment{Type: typ, Data: d}
	if msg.File != nil {
		d["url"] = string(msg.File.URL)
		d["error"] = "matrix: encrypted attachment (no end-to-end encryption support)"
		return seg
	}
	if msg.URL == "" {
		d["error"] = "matrix: media message without url"
		return seg
	}
	if in.o.Media == nil {
		return seg
	}
	name := im.MediaName(Platform, in.o.Bot.ID, evt.ID.String(), 1)
	uri, err := msg.URL.Parse()
	if err != nil {
		// Not an mxc:// URI (a non-conforming client put a web URL there): fetched like any
		// other web URL, through the SSRF guard.
		return in.o.Media.StoreSegment(ctx, seg, string(msg.URL), name)
	}
	b, ct, err := in.download(ctx, uri)
	if err != nil {
		d["error"] = err.Error()
		return seg
	}
	if ct == "" || ct == "application/octet-stream" {
		if mt, ok := d["mimeType"].(string); ok {
			ct = mt
		}
	}
	size, ct, err := in.o.Media.Put(ctx, name, b, ct)
	if err != nil {
		d["error"] = err.Error()
		return seg
	}
	d["sourceUrl"] = string(msg.URL)
	d["url"] = im.MediaScheme + name
	d["object"] = name
	d["size"] = size
	d["mimeType"] = ct
	return seg
}

// download fetches mxc content from the configured homeserver: the authenticated endpoint
// (/_matrix/client/v1/media/download, Matrix 1.11), or the legacy /_matrix/media/v3/download
// when the server does not know it (404 M_UNRECOGNIZED, or 404/405 without an errcode).
func (in *Inbound) download(ctx context.Context, uri id.ContentURI) ([]byte, string, error) {
	get := func(u string) ([]byte, string, error) {
		_, resp, err := in.mc.MakeFullRequestWithResp(ctx, mautrix.FullRequest{Method: http.MethodGet, URL: u, DontReadResponse: true})
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		if resp.ContentLength > im.MaxMedia {
			return nil, "", fmt.Errorf("matrix: media %s is %d bytes, over %d", uri, resp.ContentLength, im.MaxMedia)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, im.MaxMedia+1))
		if err != nil {
			return nil, "", fmt.Errorf("matrix: media %s: %w", uri, err)
		}
		if len(b) > im.MaxMedia {
			return nil, "", fmt.Errorf("matrix: media %s over %d bytes", uri, im.MaxMedia)
		}
		return b, resp.Header.Get("Content-Type"), nil
	}
	b, ct, err := get(in.mc.BuildURL(mautrix.ClientURLPath{"v1", "media", "download", uri.Homeserver, uri.FileID}))
	if err != nil && legacyMedia(err) {
		b, ct, err = get(in.mc.BuildURL(mautrix.MediaURLPath{"v3", "download", uri.Homeserver, uri.FileID}))
	}
	if err != nil {
		return nil, "", classify("download", err)
	}
	return b, ct, nil
}

// pinned sends requests to the configured homeserver (scheme and host:port exactly) directly,
// even when it is on loopback, and every other request (a redirect elsewhere) through the
// SSRF guard: the homeserver is the operator's, any other address may be an attacker's.
type pinned struct {
	scheme, host    string
	direct, guarded http.RoundTripper
}

func (p pinned) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == p.scheme && r.URL.Host == p.host {
		return p.direct.RoundTrip(r)
	}
	return p.guarded.RoundTrip(r)
}

func legacyMedia(err error) bool {
	switch s, code := httpStatus(err), errCode(err); {
	case code == "M_UNRECOGNIZED":
		return true
	case (s == http.StatusNotFound || s == http.StatusMethodNotAllowed) && code == "":
		return true
	}
	return false
}
