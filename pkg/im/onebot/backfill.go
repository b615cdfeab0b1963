package onebot

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Backfill after a reconnect or takeover. OneBot v11 replays nothing to a new WebSocket, so
// events sent while no replica held the connection would be lost. Every holder notes the
// last message it handled per scene (im.Cursors: memory, flushed to KV once a second); after
// connecting, it asks the implementation for each scene's latest messages with the history
// extensions most implementations have (get_group_msg_history / get_friend_msg_history:
// NapCat, LLOneBot, Lagrange.OneBot; not part of v11 itself) and ingests those newer than the
// cursor, oldest first, before the connection's own events (which wait for it). The message
// id is the dedupe id, so one that also arrives live is published once. An implementation
// without the extensions answers "unsupported" and nothing is backfilled (logged once).

const (
	// historyCount is how many of a scene's latest messages are asked for.
	historyCount = 50
	// backfillScenes caps the scenes backfilled after one connect (the most recently active).
	backfillScenes = 100
	// backfillBudget bounds one backfill.
	backfillBudget = 60 * time.Second
)

// historyCaller makes one API call on a WebSocket (wsConn).
type historyCaller interface {
	call(ctx context.Context, action string, params any, idem ...string) (json.RawMessage, error)
}

// sceneKey is a scene's cursor key: "group:<id>" or "private:<id>".
func sceneKey(scope, id string) string { return scope + ":" + id }

// backfill ingests what each known scene got after its cursor through c; it returns the
// number of messages handed to ingest.
func (in *Inbound) backfill(ctx context.Context, c historyCaller, via string) int {
	if in.cursors == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, backfillBudget)
	defer cancel()
	curs, err := in.cursors.Load(ctx)
	if err != nil {
		in.log.Warn("onebot: backfill: cursors not loaded; messages sent while disconnected are not fetched", "err", err)
		return 0
	}
	scenes := im.ScenesByRecency(curs)
	if len(scenes) > backfillScenes {
		scenes = scenes[:backfillScenes]
	}
	total := 0
	for _, key := range scenes {
		scope, id, ok := strings.Cut(key, ":")
		if !ok || ctx.Err() != nil {
			continue
		}
		n, err := in.backfillScene(ctx, c, via, scope, id, curs[key])
		total += n
		if errors.Is(err, errNoHistory) {
			in.log.Warn("onebot: the implementation has no message history API (get_group_msg_history / get_friend_msg_history); messages sent while disconnected are not fetched", "err", err)
			break
		}
		if err != nil {
			in.log.Warn("onebot: backfill scene", "scene", key, "err", err)
		}
	}
	if total > 0 {
		in.log.Info("onebot: backfilled messages sent while disconnected", "messages", total, "scenes", len(scenes))
	}
	return total
}

var errNoHistory = errors.New("onebot: history API unsupported")

// backfillScene asks for the scene's latest messages and ingests those after cur.
func (in *Inbound) backfillScene(ctx context.Context, c historyCaller, via, scope, id string, cur im.Cursor) (int, error) {
	action, params := "get_friend_msg_history", map[string]any{"user_id": number(id), "count": historyCount}
	if scope == events.ScopeGroup {
		action, params = "get_group_msg_history", map[string]any{"group_id": number(id), "count": historyCount}
	}
	data, err := c.call(ctx, action, params)
	if err != nil {
		var e *im.Error
		// 1404: action not found (the v11 retcode); some implementations answer 404 or
		// "failed" with a message saying so.
		if errors.As(err, &e) && (e.Code == 1404 || e.Code == 404 || strings.Contains(strings.ToLower(e.Msg), "not found") ||
			strings.Contains(strings.ToLower(e.Msg), "unsupported")) {
			return 0, errNoHistory
		}
		return 0, err
	}
	var page struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(data, &page); err != nil {
		return 0, err
	}
	type item struct {
		raw []byte
		ev  event
	}
	var items []item
	self, _ := in.selfID.Load().(string)
	for _, raw := range page.Messages {
		var ev event
		d := json.NewDecoder(strings.NewReader(string(raw)))
		d.UseNumber()
		if d.Decode(&ev) != nil {
			continue
		}
		mid := ev.MessageID.String()
		if mid == "" || mid == cur.ID || ev.Time*1000 < cur.Time {
			continue
		}
		user := ev.UserID.String()
		if user == "" {
			user = ev.Sender.UserID.String()
		}
		if user == self && self != "" {
			continue // the bot's own messages are in the history too
		}
		items = append(items, item{raw: fillEvent(raw, scope, id), ev: ev})
	}
	if len(items) == len(page.Messages) && len(items) > 0 && cur.Time > 0 {
		in.log.Warn("onebot: backfill: every message of the history page is new; older ones may be missing", "scene", scope+":"+id, "count", len(items))
	}
	slices.SortStableFunc(items, func(a, b item) int {
		switch {
		case a.ev.Time < b.ev.Time:
			return -1
		case a.ev.Time > b.ev.Time:
			return 1
		}
		return 0
	})
	n := 0
	for _, it := range items {
		if err := in.handleErr(ctx, it.raw, via+" backfill"); err != nil && !errors.Is(err, events.ErrInvalid) {
			return n, err
		}
		n++
	}
	return n, nil
}

// fillEvent makes a history entry a message event: implementations leave out post_type,
// message_type or the scene's id in history entries.
func fillEvent(raw json.RawMessage, scope, id string) []byte {
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if d.Decode(&m) != nil {
		return raw
	}
	if m["post_type"] == nil || m["post_type"] == "" {
		m["post_type"] = "message"
	}
	if m["message_type"] == nil || m["message_type"] == "" {
		m["message_type"] = scope
	}
	if scope == events.ScopeGroup && m["group_id"] == nil {
		m["group_id"] = json.Number(id)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

// number sends a numeric id as a JSON number (implementations parse group_id / user_id as
// integers), falling back to the string.
func number(id string) any {
	if n := json.Number(id); n.String() != "" {
		if _, err := n.Int64(); err == nil {
			return n
		}
	}
	return id
}
