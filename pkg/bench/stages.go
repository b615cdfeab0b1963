package bench

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
)

// Stages of a message on its way through the pipeline, as an observer on the bus sees them.
// Each is the time from the webhook POST to the first message on that subject for the
// message's session; the reply at the callback is the latency itself.
const (
	stageIngested    = iota // im.in.<scene> or agent.in.<sk>: ingest stored the inbound message (issue 40: in its inbox event when it reaches its session)
	stageDispatched         // agent.in.<sk>: the dispatcher put it in the session's inbox
	stageTurnStarted        // agent.evt.<sk>.<turn>.turn_started: only a turn that records its start (a tool turn carries it on its tool call request instead, issue 40)
	stageToolCall           // tool.call.<tool> for the session (first model call done)
	stageToolResult         // tool.result.<sk>.<call>: the tool worker stored the result
	stageReply              // im.out.<scene>: the turn published its reply
	numStages
)

var stageNames = [numStages]string{"ingested (im.in or agent.in)", "dispatched (agent.in)", "turn started",
	"tool call requested", "tool result stored", "reply published (im.out)"}

// StageTime is the p50 and p99 time from the webhook POST to one stage.
type StageTime struct {
	Stage string  `json:"stage"`
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	N     int     `json:"n"`
}

// marks is one session's stage timestamps (Unix ns) for its pending message.
type marks struct {
	sent atomic.Int64 // 0 when idle
	at   [numStages]atomic.Int64
}

func (m *marks) reset(t0 time.Time) {
	for i := range m.at {
		m.at[i].Store(0)
	}
	m.sent.Store(t0.UnixNano())
}

func (m *marks) mark(stage int, now int64) {
	if m.sent.Load() != 0 {
		m.at[stage].CompareAndSwap(0, now)
	}
}

// collect appends the stage times of the message sent at t0 to per, and returns them (0: the
// stage was not seen).
func (m *marks) collect(per *[numStages][]time.Duration) (got [numStages]time.Duration) {
	t0 := m.sent.Swap(0)
	for i := range m.at {
		if at := m.at[i].Load(); at > t0 && t0 != 0 {
			per[i] = append(per[i], time.Duration(at-t0))
			got[i] = time.Duration(at - t0)
		}
	}
	return got
}

// turnStages is one message's latency and its stage times (collect).
type turnStages struct {
	lat time.Duration
	at  [numStages]time.Duration
}

// StepTime is one step between adjacent stages (the previous stage seen, or the POST, to this
// one; the last step ends at the callback): its p50 and p99 over every message, and its mean
// over the slowest 1 % of the messages (by latency), which says where their time went.
type StepTime struct {
	Step       string  `json:"step"`
	P50Ms      float64 `json:"p50Ms"`
	P99Ms      float64 `json:"p99Ms"`
	SlowMeanMs float64 `json:"slowMeanMs"`
}

// stepTimes splits each message's latency into the steps between the stages seen.
func stepTimes(turns []turnStages) []StepTime {
	if len(turns) == 0 {
		return nil
	}
	const n = numStages + 1 // the last step: reply published -> callback
	names := [n]string{}
	prevName := "POST"
	for i := range numStages {
		names[i] = prevName + " → " + stageNames[i]
		prevName = stageNames[i]
	}
	names[numStages] = prevName + " → callback"
	steps := func(t turnStages) (d [n]time.Duration, ok [n]bool) {
		var prev time.Duration
		for i := range numStages {
			if t.at[i] > 0 {
				d[i], ok[i] = max(0, t.at[i]-prev), true
				prev = max(prev, t.at[i])
			}
		}
		d[numStages], ok[numStages] = max(0, t.lat-prev), true
		return d, ok
	}
	slow := slices.Clone(turns)
	slices.SortFunc(slow, func(a, b turnStages) int { return int(b.lat - a.lat) })
	slow = slow[:max(1, len(slow)/100)]
	var out []StepTime
	for i := range n {
		var all []time.Duration
		for _, t := range turns {
			if d, ok := steps(t); ok[i] {
				all = append(all, d[i])
			}
		}
		if len(all) == 0 {
			continue
		}
		var sum time.Duration
		var cnt int
		for _, t := range slow {
			if d, ok := steps(t); ok[i] {
				sum += d[i]
				cnt++
			}
		}
		slices.Sort(all)
		st := StepTime{Step: names[i], P50Ms: ms(pct(all, 50)), P99Ms: ms(pct(all, 99))}
		if cnt > 0 {
			st.SlowMeanMs = ms(sum / time.Duration(cnt))
		}
		out = append(out, st)
	}
	return out
}

// observer subscribes to the pipeline's subjects on its own connection.
type observer struct {
	nc     *nats.Conn
	byTok  map[string]*marks // session token (agent.in, agent.evt, tool.result) -> marks
	byScen map[string]*marks // scene token (im.in, im.out) -> marks
	byKey  map[string]*marks // session key string (tool.call's session header) -> marks
}

func (h *Harness) observe(ms []*marks) (*observer, error) {
	nc, err := h.dial()
	if err != nil {
		return nil, fmt.Errorf("bench: observer: %w", err)
	}
	o := &observer{nc: nc, byTok: map[string]*marks{}, byScen: map[string]*marks{}, byKey: map[string]*marks{}}
	for i, m := range ms {
		sk := h.sessionKey(i)
		o.byTok[sk.Token()] = m
		o.byScen[events.EncodeToken(sk.Scene)] = m
		o.byKey[sk.String()] = m
	}
	for _, subj := range []string{events.PrefixIMIn + ".>", events.PrefixAgentIn + ".>", events.PrefixAgentEvt + ".>",
		events.PrefixToolCall + ".>", events.PrefixToolResult + ".>", events.PrefixIMOut + ".>"} {
		if _, err := nc.Subscribe(subj, o.onMsg); err != nil {
			nc.Close()
			return nil, fmt.Errorf("bench: observer: %w", err)
		}
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return o, nil
}

func (o *observer) onMsg(msg *nats.Msg) {
	now := time.Now().UnixNano()
	tok := strings.Split(msg.Subject, ".")
	if len(tok) < 3 {
		return
	}
	prefix := tok[0] + "." + tok[1]
	switch prefix {
	case events.PrefixIMIn, events.PrefixIMOut:
		if m := o.byScen[tok[len(tok)-1]]; m != nil {
			stage := stageIngested
			if prefix == events.PrefixIMOut {
				stage = stageReply
			}
			m.mark(stage, now)
		}
	case events.PrefixAgentIn:
		if m := o.byTok[tok[2]]; m != nil {
			m.mark(stageIngested, now) // the inbox event is the message's one copy
			m.mark(stageDispatched, now)
		}
	case events.PrefixToolCall:
		sid := msg.Header.Get(events.HeaderSession)
		if i := strings.LastIndexByte(sid, '#'); i >= 0 {
			sid = sid[:i]
		}
		if m := o.byKey[sid]; m != nil {
			m.mark(stageToolCall, now)
		}
	case events.PrefixToolResult:
		if m := o.byTok[tok[2]]; m != nil {
			m.mark(stageToolResult, now)
		}
	case events.PrefixAgentEvt:
		if len(tok) < 4 {
			return
		}
		if m := o.byTok[tok[2]]; m != nil {
			if tok[len(tok)-1] == events.EvtKindTurnStarted {
				m.mark(stageTurnStarted, now)
			}
		}
	}
}

func (o *observer) close() { o.nc.Close() }

func stageTimes(per *[numStages][]time.Duration) []StageTime {
	var out []StageTime
	for i := range per {
		d := per[i]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		out = append(out, StageTime{Stage: stageNames[i], P50Ms: ms(pct(d, 50)), P99Ms: ms(pct(d, 99)), N: len(d)})
	}
	return out
}
