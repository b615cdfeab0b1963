package discord

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Backfill after a takeover. The gateway replays missed events only to a session that
// RESUMEs (the library does that by itself when its own socket drops), never to a new
// session, and discordgo keeps a session's id and sequence to itself, so a replica that takes
// the gateway over cannot resume its predecessor's session. Instead every holder notes the
// last message it handled per channel (im.Cursors: memory, flushed to KV once a second), and
// after each READY (a new session: a takeover, or a reconnect that could not resume) it asks
// GET /channels/{id}/messages?after=<last> for every channel it knows, oldest first, and
// ingests what it finds before the gateway's own MESSAGE_CREATEs (handlers run in gateway
// order, and the READY handler runs the backfill). The message id is the dedupe id, so a
// message that came both ways is published once.

const (
	// backfillPage is the page size of GET /channels/{id}/messages (Discord's maximum).
	backfillPage = 100
	// backfillPages caps the pages fetched per channel (1,000 messages).
	backfillPages = 10
	// backfillChannels caps the channels backfilled after one READY (the most recently active).
	backfillChannels = 200
	// backfillBudget bounds one backfill, so the gateway's heartbeat acks are read in time.
	backfillBudget = 90 * time.Second
)

// backfill ingests what each known channel got after its cursor. It returns the number of
// messages handed to ingest.
func (in *Inbound) backfill(ctx context.Context, s *discordgo.Session) int {
	if in.cursors == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, backfillBudget)
	defer cancel()
	curs, err := in.cursors.Load(ctx)
	if err != nil {
		in.log.Warn("discord: backfill: cursors not loaded; messages sent during the takeover are not fetched", "err", err)
		return 0
	}
	channels := im.ScenesByRecency(curs)
	if len(channels) > backfillChannels {
		channels = channels[:backfillChannels]
	}
	total := 0
	for _, ch := range channels {
		if ctx.Err() != nil {
			in.log.Warn("discord: backfill cut short", "channels", len(channels), "messages", total, "err", ctx.Err())
			break
		}
		cur := in.newestPublished(ctx, ch, curs[ch])
		n, err := in.backfillChannel(ctx, s, ch, cur.Scope, cur.ID)
		total += n
		if err != nil {
			in.log.Warn("discord: backfill channel", "channel", ch, "after", cur.ID, "err", err)
		}
	}
	if total > 0 {
		in.log.Info("discord: backfilled messages sent while no session was open", "handled", total, "channels", len(channels))
	}
	return total
}

// newestPublished is the later of the channel's cursor and the last message the bus holds for
// it (im.LastInbound: IM_IN or the session inbox): a cursor noted but not yet flushed when its
// holder died would otherwise make those messages come again (deduplicated, unless the
// takeover outlasts the streams' dedupe window).
func (in *Inbound) newestPublished(ctx context.Context, channel string, cur im.Cursor) im.Cursor {
	if in.o.JS == nil || cur.Scope == "" {
		return cur
	}
	sk := events.SessionKey{Platform: Platform, Bot: in.o.Bot.ID, Scope: cur.Scope, Scene: channel}
	m, ok := im.LastInbound(ctx, in.o.JS, sk)
	if !ok || m.Platform != Platform || m.Bot != in.o.Bot.ID {
		return cur
	}
	if id := m.MessageID; isSnowflake(id) && im.IDAfter(id, cur.ID) {
		cur.ID = id
	}
	return cur
}

func isSnowflake(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// backfillChannel pages through the channel's messages after id, oldest first.
// scope is the channel's session scope (REST messages carry no guild_id).
func (in *Inbound) backfillChannel(ctx context.Context, s *discordgo.Session, channel, scope, after string) (int, error) {
	n := 0
	for range backfillPages {
		var page []*discordgo.Message
		var err error
		for attempt := 0; ; attempt++ {
			page, err = s.ChannelMessages(channel, backfillPage, "", after, "", discordgo.WithContext(ctx))
			var e *im.Error
			if err == nil || attempt >= 3 || !errors.As(classify("getMessages", err), &e) || e.Perm {
				break
			}
			wait := e.RetryAfter
			if wait <= 0 {
				wait = time.Duration(attempt+1) * time.Second
			}
			if !im.Sleep(ctx, wait) {
				return n, ctx.Err()
			}
		}
		if err != nil {
			return n, classify("getMessages", err)
		}
		// Discord lists newest first; ingest oldest first, as the gateway would have.
		slices.SortFunc(page, func(a, b *discordgo.Message) int {
			switch {
			case a.ID == b.ID:
				return 0
			case im.IDAfter(a.ID, b.ID):
				return 1
			}
			return -1
		})
		for _, m := range page {
			if m == nil || !im.IDAfter(m.ID, after) {
				continue
			}
			if m.ChannelID == "" {
				m.ChannelID = channel
			}
			if err := in.message(ctx, m, scope); err != nil && !errors.Is(err, events.ErrInvalid) {
				return n, err
			}
			n++
		}
		if len(page) < backfillPage {
			return n, nil
		}
		after = page[len(page)-1].ID
	}
	return n, nil
}
