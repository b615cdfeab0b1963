package webconsole

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

// A fork re-runs a conversation from one of its turns against another model, as a session of
// its own (platform events.PlatformFork, key fork:<id>:<scope>:<original key>) that the real
// turn workers run and egress never sends:
//
//  1. its context log (AGENT_CTX, epoch 1) starts with the snapshot the original turn ran on;
//  2. its session record carries the model override (as /model would set it) and the queue
//     policy, so its turns run one after the other, in the original order;
//  3. the original turn's inbound message and every later one of the same epoch are
//     published into its inbox, rewritten to the fork's key.
//
// Everything it is lives on the bus, so any console replica can reopen and compare it later.

// ErrFork is returned when a fork cannot be made from the requested point; the message says why.
var ErrFork = errors.New("webconsole: cannot fork")

func forkOf(sk events.SessionKey) *ForkOf {
	if sk.Platform != events.PlatformFork {
		return nil
	}
	orig, err := events.ParseSessionKey(sk.Scene)
	if err != nil {
		return nil
	}
	return &ForkOf{ID: sk.Bot, Origin: orig}
}

// ForkRequest says where to fork and against what.
type ForkRequest struct {
	From  events.SessionKey
	Turn  string // the turn whose input the fork starts with
	Model string // an ai.agents binding name or provider/model (what /model accepts); "": the original's
	// SystemPrompt, when set, replaces the opening of the system prompt in the fork (who the
	// assistant is); the chat, tool and memory sections stay.
	SystemPrompt string
}

// Fork creates the fork session and publishes its inputs; it returns the fork's key. The turns
// run asynchronously on the turn workers; the fork's page shows them as they commit.
func (r *Reader) Fork(ctx context.Context, req ForkRequest) (events.SessionKey, error) {
	req.Model, req.SystemPrompt = strings.TrimSpace(req.Model), strings.TrimSpace(req.SystemPrompt)
	if req.Model == "" && req.SystemPrompt == "" {
		return events.SessionKey{}, fmt.Errorf("%w: choose another model or another system prompt", ErrFork)
	}
	conv, err := r.Conversation(ctx, req.From)
	if err != nil {
		return events.SessionKey{}, err
	}
	if req.Model == "" && conv.Session != nil { // the same model, another system prompt
		req.Model = conv.Session.ModelOverride
		if req.Model == "" {
			req.Model = conv.Session.Model
		}
	}
	start := -1
	for i, t := range conv.Turns {
		if t.ID == req.Turn {
			start = i
		}
	}
	if start < 0 {
		return events.SessionKey{}, fmt.Errorf("%w: no turn %s in %s", ErrFork, req.Turn, req.From)
	}
	first := conv.Turns[start]
	var inputs []*events.Event[events.UserMessage]
	for _, t := range conv.Turns[start:] {
		if t.Epoch != first.Epoch || t.Trigger.Seq == 0 {
			continue
		}
		if t.Trigger.Type != "" && t.Trigger.Type != events.TypeUserMessage {
			continue
		}
		if ev := r.inboxMessage(ctx, t.Trigger.Seq); ev != nil {
			inputs = append(inputs, ev)
		}
	}
	if len(inputs) == 0 {
		return events.SessionKey{}, fmt.Errorf("%w: the inbound messages from turn %s on are no longer in %s", ErrFork, req.Turn, events.StreamSessionIn)
	}
	var prefix []llm.Message
	if first.ContextSeq > 0 {
		l, err := r.ctxlog.LoadContextAt(ctx, events.SessionID{Key: req.From, Epoch: max(first.Epoch, 1)}, first.ContextSeq)
		if err != nil {
			return events.SessionKey{}, fmt.Errorf("load the context turn %s ran on: %w", req.Turn, err)
		}
		if l.Summary != nil {
			prefix = append(prefix, llm.UserText("[Summary of the earlier conversation]\n"+l.Summary.Text, l.Summary.Time.UnixMilli()))
		}
		prefix = append(prefix, l.Messages...)
	}
	id := newForkID()
	fk := events.SessionKey{Platform: events.PlatformFork, Bot: id, Scope: req.From.Scope, Scene: req.From.String()}
	if len(prefix) > 0 {
		if _, err := r.ctxlog.AppendMessages(ctx, events.SessionID{Key: fk, Epoch: 1}, 0, prefix); err != nil {
			return events.SessionKey{}, fmt.Errorf("seed the fork's context: %w", err)
		}
	}
	if _, err := r.sessions.GetOrCreate(ctx, fk); err != nil {
		return events.SessionKey{}, err
	}
	if _, err := r.sessions.Update(ctx, fk, func(s *store.Session) error {
		s.ModelOverride, s.SystemPrompt, s.Concurrency = req.Model, req.SystemPrompt, "queue"
		return nil
	}); err != nil {
		return events.SessionKey{}, err
	}
	for i, ev := range inputs {
		m := ev.Data.Message
		m.Platform, m.Bot, m.Scene = fk.Platform, fk.Bot, events.Scene{Type: fk.Scope, ID: fk.Scene}
		out := events.New(events.UserMessage{Message: m, Text: ev.Data.Text},
			events.WithSession(events.SessionID{Key: fk, Epoch: 1}.String()), events.WithID(id+"-"+strconv.Itoa(i)))
		msg, err := events.NewMsg(events.AgentInSubject(fk), out)
		if err != nil {
			return events.SessionKey{}, err
		}
		msg.Header.Set(HeaderForkOf, req.From.String())
		msg.Header.Set(HeaderForkModel, req.Model)
		if _, err := r.js.PublishMsg(ctx, msg); err != nil {
			return events.SessionKey{}, fmt.Errorf("publish the fork's input %d: %w", i, err)
		}
	}
	return fk, nil
}

// Headers a fork's inbox messages carry (for audits: where it came from, against what).
const (
	HeaderForkOf    = "Agentbus-Fork-Of"
	HeaderForkModel = "Agentbus-Fork-Model"
)

// inboxMessage reads the user message at SESSION_IN sequence seq (nil when it is gone or is
// something else).
func (r *Reader) inboxMessage(ctx context.Context, seq uint64) *events.Event[events.UserMessage] {
	st, err := r.js.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		return nil
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := st.GetMsg(gctx, seq)
	if err != nil {
		return nil
	}
	ev := new(events.Event[events.UserMessage])
	if events.UnmarshalMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, ev) != nil {
		return nil
	}
	return ev
}

func newForkID() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Comparison pairs a fork's turns with the original's: the same inbound message, answered by
// each side, with tokens, cost and latency.
type Comparison struct {
	Origin events.SessionKey
	Model  string
	Rows   []CompareRow
	Orig   Totals
	Forked Totals
}

// CompareRow is one inbound message and both answers.
type CompareRow struct {
	Input      string
	Orig, Fork *Turn
}

// Compare reads the original of fork c and pairs the turns by their inbound text, in order.
func (r *Reader) Compare(ctx context.Context, c *Conversation) (*Comparison, error) {
	if c.Fork == nil {
		return nil, nil
	}
	orig, err := r.Conversation(ctx, c.Fork.Origin)
	if err != nil {
		return nil, err
	}
	cmp := &Comparison{Origin: c.Fork.Origin}
	if c.Session != nil {
		cmp.Model = c.Session.ModelOverride
	}
	used := make([]bool, len(orig.Turns))
	for _, ft := range c.Turns {
		row := CompareRow{Input: strings.Join(ft.Inputs, "\n"), Fork: ft}
		// The original turn with the same input that is not paired yet, latest first would
		// pick a repeat; earliest is the one the fork replays.
		for i, ot := range orig.Turns {
			if !used[i] && strings.Join(ot.Inputs, "\n") == row.Input {
				used[i], row.Orig = true, ot
				break
			}
		}
		cmp.Rows = append(cmp.Rows, row)
		cmp.Forked.add(&ft.Usage)
		if row.Orig != nil {
			cmp.Orig.add(&row.Orig.Usage)
		}
	}
	return cmp, nil
}
