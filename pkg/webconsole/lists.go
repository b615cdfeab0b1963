package webconsole

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

// SessionRow is one line of /sessions.
type SessionRow struct {
	Key          string
	Platform     string
	Scope        string
	Scene        string
	Epoch        uint64
	Status       string
	Model        string
	LastActivity time.Time
	Totals       Totals
	Fork         bool
}

// SessionPage is one page of the session list.
type SessionPage struct {
	Rows     []SessionRow
	Total    int
	Page     int
	PageSize int
	Query    string
	// TextMatches is set when the query matched message text (not only keys).
	TextSearch bool
}

// Sessions lists the session records (KV sessions), most recent first, filtered by q (a part of
// the key, or, when text is set, of any committed message), and reads the turns, tokens and cost
// of the page's sessions from their context logs.
func (r *Reader) Sessions(ctx context.Context, q string, text bool, page, size int) (*SessionPage, error) {
	lister, err := r.kv.ListKeys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, err
	}
	var all []*store.Session
	if lister != nil {
		for k := range lister.Keys() {
			e, err := r.kv.Get(ctx, k)
			if err != nil {
				continue
			}
			var s store.Session
			if json.Unmarshal(e.Value(), &s) == nil && s.SessionKey != "" {
				all = append(all, &s)
			}
		}
	}
	q = strings.TrimSpace(q)
	var hits map[string]bool
	if q != "" && text {
		if hits, err = r.searchText(ctx, q); err != nil {
			return nil, err
		}
	}
	lq := strings.ToLower(q)
	rows := all[:0]
	for _, s := range all {
		if q == "" || strings.Contains(strings.ToLower(s.SessionKey), lq) || hits[s.SessionKey] {
			rows = append(rows, s)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].LastActivity != rows[j].LastActivity {
			return rows[i].LastActivity > rows[j].LastActivity
		}
		return rows[i].SessionKey < rows[j].SessionKey
	})
	sp := &SessionPage{Total: len(rows), Page: max(page, 1), PageSize: size, Query: q, TextSearch: text}
	lo := min((sp.Page-1)*size, len(rows))
	hi := min(lo+size, len(rows))
	sp.Rows = make([]SessionRow, hi-lo)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, s := range rows[lo:hi] {
		sk, _ := events.ParseSessionKey(s.SessionKey)
		row := SessionRow{Key: s.SessionKey, Platform: sk.Platform, Scope: sk.Scope, Scene: sk.Scene, Epoch: s.Epoch,
			Status: string(s.Status), Model: s.Model, LastActivity: time.UnixMilli(max(s.LastActivity, s.UpdatedAt)), Fork: sk.Platform == events.PlatformFork}
		if s.ModelOverride != "" {
			row.Model = s.ModelOverride
		}
		sp.Rows[i] = row
		wg.Add(1)
		go func(i int, sid events.SessionID) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			sp.Rows[i].Totals = r.contextTotals(ctx, sid)
			if sp.Rows[i].Model == "" {
				sp.Rows[i].Model = sp.Rows[i].Totals.Model
			}
		}(i, events.SessionID{Key: sk, Epoch: max(s.Epoch, 1)})
	}
	wg.Wait()
	return sp, nil
}

// contextTotals sums the committed turns of one session id from its context log: every record
// a turn committed counts as one turn, every assistant message's usage adds up.
func (r *Reader) contextTotals(ctx context.Context, sid events.SessionID) Totals {
	var t Totals
	for cr, err := range r.ctxlog.History(ctx, sid) {
		if err != nil {
			break
		}
		if cr.Turn != "" {
			t.Turns++
		}
		for i := range cr.Msgs {
			addUsage(&t, &cr.Msgs[i])
		}
		t.LastActivityMs = max(t.LastActivityMs, cr.Time.UnixMilli())
	}
	return t
}

func addUsage(t *Totals, m *llm.Message) {
	if m.Role != llm.RoleAssistant {
		return
	}
	t.ModelCalls++
	t.Model = strings.TrimPrefix(m.Provider+"/"+m.Model, "/")
	if m.Usage != nil {
		t.Input += m.Usage.Input
		t.Output += m.Usage.Output
		t.Cost += m.Usage.Cost.Total
	}
	if m.StopReason == llm.StopReasonError {
		t.Failed++
	}
}

// searchMax bounds a text search: the most recent context records it reads.
const searchMax = 50000

// searchText returns the session keys whose committed messages of the last 30 days contain q
// (case-insensitive).
func (r *Reader) searchText(ctx context.Context, q string) (map[string]bool, error) {
	lq := strings.ToLower(q)
	hits := map[string]bool{}
	n := 0
	err := store.Scan(ctx, r.js, events.StreamAgentCtx, events.PrefixAgentCtx+".>", 0, time.Now().Add(-30*24*time.Hour), func(m *jetstream.RawStreamMsg) bool {
		n++
		if !strings.Contains(strings.ToLower(string(m.Data)), lq) {
			return n < searchMax
		}
		ev, err := events.DecodeMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			return n < searchMax
		}
		if e, ok := ev.(*events.Event[events.CtxMessages]); ok {
			for i := range e.Data.Messages {
				if strings.Contains(strings.ToLower(e.Data.Messages[i].TextContent()), lq) {
					if sid, err := events.ParseSessionID(e.Session); err == nil {
						hits[sid.Key.String()] = true
					}
					break
				}
			}
		}
		return n < searchMax
	})
	return hits, err
}

// Overview is what / shows besides the replicas.
type Overview struct {
	Since         time.Time
	TurnsToday    int
	TurnsPerMin   float64 // over the last 10 minutes
	FailedToday   int
	Input, Output int
	Cost          float64
	ByModel       []ModelUse
	DeadLetters   int
	DeadLastHour  int
	Sessions      int
	Capped        bool // the day had more records than one overview reads
}

// ModelUse is one model's share of today's calls.
type ModelUse struct {
	Model         string
	Calls         int
	Input, Output int
	Cost          float64
}

// overviewMax bounds the records one overview reads per stream.
const overviewMax = 200000

// Overview reads today's (since local midnight) commits from AGENT_CTX, failures from
// AGENT_EVENTS, and the dead letters' count.
func (r *Reader) Overview(ctx context.Context, now time.Time) (*Overview, error) {
	y, m, d := now.Date()
	o := &Overview{Since: time.Date(y, m, d, 0, 0, 0, 0, now.Location())}
	recent := now.Add(-10 * time.Minute)
	byModel := map[string]*ModelUse{}
	var recentTurns, n int
	err := store.Scan(ctx, r.js, events.StreamAgentCtx, events.PrefixAgentCtx+".>", 0, o.Since, func(m *jetstream.RawStreamMsg) bool {
		n++
		if n > overviewMax {
			o.Capped = true
			return false
		}
		if m.Header.Get(events.HeaderTurn) == "" {
			return true
		}
		ev, err := events.DecodeMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			return true
		}
		e, ok := ev.(*events.Event[events.CtxMessages])
		if !ok {
			return true
		}
		o.TurnsToday++
		if m.Time.After(recent) {
			recentTurns++
		}
		for i := range e.Data.Messages {
			msg := &e.Data.Messages[i]
			if msg.Role != llm.RoleAssistant || msg.Usage == nil {
				continue
			}
			k := strings.TrimPrefix(msg.Provider+"/"+msg.Model, "/")
			mu := byModel[k]
			if mu == nil {
				mu = &ModelUse{Model: k}
				byModel[k] = mu
			}
			mu.Calls++
			mu.Input += msg.Usage.Input
			mu.Output += msg.Usage.Output
			mu.Cost += msg.Usage.Cost.Total
			o.Input += msg.Usage.Input
			o.Output += msg.Usage.Output
			o.Cost += msg.Usage.Cost.Total
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	o.TurnsPerMin = float64(recentTurns) / 10
	for _, mu := range byModel {
		o.ByModel = append(o.ByModel, *mu)
	}
	sort.Slice(o.ByModel, func(i, j int) bool { return o.ByModel[i].Calls > o.ByModel[j].Calls })
	n = 0
	// Both layouts: agent.evt.<sk>.turn_failed, and agent.evt.<sk>.<turn>.turn_failed stored
	// before issue 41.
	for _, filter := range []string{events.AgentEvtKindFilter(events.EvtKindTurnFailed), events.AgentEvtLegacyKindFilter(events.EvtKindTurnFailed)} {
		err = store.Scan(ctx, r.js, events.StreamAgentEvents, filter, 0, o.Since, func(m *jetstream.RawStreamMsg) bool {
			n++
			o.FailedToday++
			return n < overviewMax
		})
		if err != nil {
			return nil, err
		}
	}
	if st, err := r.js.Stream(ctx, events.StreamDeadLetters); err == nil {
		o.DeadLetters = int(st.CachedInfo().State.Msgs)
		hour := now.Add(-time.Hour)
		_ = store.Scan(ctx, r.js, events.StreamDeadLetters, events.PrefixDeadLetter+".>", 0, hour, func(*jetstream.RawStreamMsg) bool {
			o.DeadLastHour++
			return o.DeadLastHour < overviewMax
		})
	}
	if keys, err := r.kv.ListKeys(ctx); err == nil {
		for range keys.Keys() {
			o.Sessions++
		}
	}
	return o, nil
}
