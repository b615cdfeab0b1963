package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/dlq"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

func connectJS(bus busFlags) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := bus.dial("agentbus cli")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// cmdSessions lists the session records in KV sessions.
func cmdSessions(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("sessions", flag.ContinueOnError)
	bus := addBusFlags(fs)
	asJSON := fs.Bool("json", false, "print the records as JSON lines")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "agentbus sessions — list the session records (KV sessions), most recent first.\n\nUsage:\n  agentbus sessions [flags]\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), clientEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, js, err := connectJS(bus)
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		return err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	var rows []store.Session
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var s store.Session
		if json.Unmarshal(e.Value(), &s) == nil {
			rows = append(rows, s)
		}
	}
	streams := map[string]jetstream.Stream{}
	for _, name := range []string{events.StreamSessionIn, events.StreamAgentEvents, events.StreamAgentCtx} {
		if st, err := js.Stream(ctx, name); err == nil {
			streams[name] = st
		}
	}
	for i := range rows {
		rows[i].LastActivity = lastActivity(ctx, streams, rows[i])
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].LastActivity > rows[j].LastActivity })
	for _, s := range rows {
		if *asJSON {
			b, _ := json.Marshal(s)
			fmt.Fprintln(w, string(b))
			continue
		}
		fmt.Fprintf(w, "%-50s epoch %-3d %-8s model %-24s open turns %d  last %s\n", s.SessionKey, s.Epoch, s.Status,
			s.Model, len(s.OpenTurns), time.UnixMilli(s.LastActivity).Format(time.DateTime))
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "no sessions yet")
	}
	return nil
}

// lastActivity is when anything last happened in s, as the streams say: the latest of the
// record's LastActivity (which the turn worker sets when a turn starts), the last inbox event
// (SESSION_IN), the last turn event (AGENT_EVENTS) and the last commit of the current epoch
// (AGENT_CTX). Unix ms.
func lastActivity(ctx context.Context, streams map[string]jetstream.Stream, s store.Session) int64 {
	last := s.LastActivity
	sk, err := events.ParseSessionKey(s.SessionKey)
	if err != nil {
		return last
	}
	for _, q := range []struct{ stream, subject string }{
		{events.StreamSessionIn, events.AgentInSubject(sk)},
		{events.StreamAgentEvents, events.AgentEvtSessionFilter(sk)},
		{events.StreamAgentCtx, events.AgentCtxSubject(events.SessionID{Key: sk, Epoch: max(s.Epoch, 1)})},
	} {
		st := streams[q.stream]
		if st == nil {
			continue
		}
		m, err := st.GetLastMsgForSubject(ctx, q.subject)
		if err != nil {
			continue
		}
		last = max(last, m.Time.UnixMilli())
	}
	return last
}

// cmdReplay prints a session's turns from AGENT_EVENTS: inputs, every message, tool calls and
// their results, commits and failures, in stream order. Ended epochs that the streams no
// longer hold (trimmed once archived, or aged out) are read from their archive in object store
// epochs (store.EpochArchive), with the same output.
func cmdReplay(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	bus := addBusFlags(fs)
	fromSeq := fs.Uint64("from-seq", 0, "start at this AGENT_EVENTS sequence")
	since := fs.Duration("since", 0, "start this long ago (e.g. 2h)")
	asJSON := fs.Bool("json", false, "print the raw events as JSON lines")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "agentbus replay — print a session's turns from the event log (AGENT_EVENTS): inputs, messages,\n"+
			"tool calls and results, commits and failures, in stream order. Ended epochs are read from\n"+
			"their archive (object store epochs) where the streams no longer hold them.\n\nUsage:\n  agentbus replay [flags] platform:bot:scope:scene\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), clientEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: agentbus replay [--from-seq N | --since D] platform:bot:scope:scene")
	}
	sk, err := events.ParseSessionKey(fs.Arg(0))
	if err != nil {
		return err
	}
	nc, js, err := connectJS(bus)
	if err != nil {
		return err
	}
	defer nc.Close()
	log, err := store.NewTurnLog(ctx, js)
	if err != nil {
		return err
	}
	// Ended epochs are read from their archive where the streams no longer hold them (a
	// bus without the object store, from before it, has only the streams).
	arch, err := store.OpenEpochArchive(ctx, js, nil)
	if err != nil {
		arch = nil
	}
	from := store.ReplayFrom{Seq: *fromSeq}
	if *since > 0 {
		from.Time = time.Now().Add(-*since)
	}
	epochs, marks, err := contextMarks(ctx, js, arch, sk, from.Time)
	if err != nil {
		return err
	}
	dead, byTurn, err := deadLetterMarks(ctx, js, sk, from.Time)
	if err != nil {
		return err
	}
	marks = append(marks, dead...)
	sort.SliceStable(marks, func(i, j int) bool { return marks[i].at.Before(marks[j].at) })
	n := 0
	print := func(rec store.TurnRecord) {
		n++
		if *asJSON {
			b, _ := json.Marshal(rec.Event)
			fmt.Fprintln(w, string(b))
			return
		}
		printRecord(w, rec, byTurn)
	}
	printMark := func(m contextMark) {
		switch {
		case m.rec != nil:
			print(*m.rec)
		case !*asJSON:
			fmt.Fprintln(w, m.text)
		}
	}
	first := true
	for rec, err := range arch.Replay(ctx, log, sk, epochs, from) {
		if err != nil {
			return err
		}
		if first && from.Seq > 0 {
			// --from-seq counts AGENT_EVENTS; what the context log holds starts with it.
			marks = slices.DeleteFunc(marks, func(m contextMark) bool { return m.at.Before(rec.Time) })
		}
		first = false
		for len(marks) > 0 && !marks[0].at.After(rec.Time) {
			printMark(marks[0])
			marks = marks[1:]
		}
		print(rec)
	}
	for _, m := range marks {
		printMark(m)
	}
	if n == 0 {
		fmt.Fprintf(w, "no turn events for %s\n", sk)
	}
	return nil
}

// contextMark is a line replay prints where it happened in AGENT_CTX: an epoch's start, each
// compaction, each move of the session tree's active leaf; or (rec) a turn record that a
// commit closing its turn stands for (store.ClosingRecords: the turn's tail and its
// turn_committed, which such a turn does not write to AGENT_EVENTS).
type contextMark struct {
	at   time.Time
	text string
	rec  *store.TurnRecord
}

// contextMarks reads the context logs of every epoch of sk (AGENT_CTX, and the archive of
// the ended epochs it no longer holds) for its compactions, leaf moves and closing commits; it
// also returns the session's current epoch (0: no session record).
func contextMarks(ctx context.Context, js jetstream.JetStream, arch *store.EpochArchive, sk events.SessionKey, since time.Time) (uint64, []contextMark, error) {
	sessions, err := store.OpenSessions(ctx, js)
	if err != nil {
		return 0, nil, err
	}
	sess, err := sessions.Get(ctx, sk)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	cl, err := store.NewContextLog(ctx, js, store.ContextBounds{})
	if err != nil {
		return 0, nil, err
	}
	var out []contextMark
	for epoch := uint64(1); epoch <= sess.Epoch; epoch++ {
		first := true
		for r, err := range arch.ContextHistory(ctx, cl, events.SessionID{Key: sk, Epoch: epoch}) {
			if err != nil {
				return 0, nil, err
			}
			if first && epoch > 1 && !r.Time.Before(since) {
				out = append(out, contextMark{at: r.Time, text: fmt.Sprintf("\n%s  ══ epoch %d (context seq %d)", stamp(r.Time), epoch, r.Seq)})
			}
			first = false
			if r.Time.Before(since) {
				continue
			}
			for _, rec := range store.ClosingRecords(sk, events.SessionID{Key: sk, Epoch: epoch}, r) {
				out = append(out, contextMark{at: rec.Time, rec: &rec})
			}
			if l := r.Leaf; l != nil {
				text := fmt.Sprintf("%s  ↶ active leaf moved to context seq %d (context seq %d)", stamp(r.Time), l.LeafSeq, r.Seq)
				if l.BranchTo > 0 {
					text += fmt.Sprintf("; branch seq %d..%d left", l.BranchFrom, l.BranchTo)
				}
				if l.BranchSummary != "" {
					text += ", summarized: " + oneLine(l.BranchSummary)
				}
				out = append(out, contextMark{at: r.Time, text: text})
				continue
			}
			if r.Summary == nil {
				continue
			}
			s := r.Summary
			out = append(out, contextMark{at: r.Time, text: fmt.Sprintf("%s  ⇣ compaction %d (context seq %d): %d messages up to seq %d summarized by %s: %s",
				stamp(r.Time), s.Count, r.Seq, s.Covered, s.AnchorSeq, s.Model, oneLine(s.Text))})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return sess.Epoch, out, nil
}

// deadLetterMarks are the session's dead letters (every role's, DEAD_LETTERS) as replay lines at
// the time each role gave up, and the ids of the letters of each turn (a turn whose reply was
// dead-lettered is committed, but its reply never reached the chat).
func deadLetterMarks(ctx context.Context, js jetstream.JetStream, sk events.SessionKey, since time.Time) ([]contextMark, map[string][]string, error) {
	store, err := dlq.Open(ctx, js)
	if err != nil {
		return nil, nil, err
	}
	ls, err := store.List(ctx, dlq.Filter{Session: sk.String(), Since: since})
	if err != nil {
		return nil, nil, err
	}
	var out []contextMark
	byTurn := map[string][]string{}
	for _, l := range ls {
		what := "dead-lettered"
		if l.Role == events.RoleEgress {
			what = "reply dead-lettered, NOT delivered"
		}
		text := fmt.Sprintf("%s  ✗ %s by %s (%s): %s [agentbus dlq show %s]", stamp(l.Time), what, l.Role, l.Reason, oneLine(l.Error), l.ID)
		if l.Turn != "" {
			byTurn[l.Turn] = append(byTurn[l.Turn], l.ID)
			text += " (turn " + l.Turn + ")"
		}
		out = append(out, contextMark{at: l.Time, text: text})
	}
	return out, byTurn, nil
}

// stamp is the time of a replay line.
func stamp(t time.Time) string { return t.Local().Format("15:04:05.000") }

// happened is when a record's event happened: the message's own timestamp for a message (a
// turn's tail is stored with its commit, later than it was said), else the event's time, else
// when the server stored it.
func happened(rec store.TurnRecord) time.Time {
	if e, ok := rec.Event.(*events.Event[events.MessageEnd]); ok && e.Data.Message.Timestamp > 0 {
		return time.UnixMilli(e.Data.Message.Timestamp)
	}
	// A turn_started is written with the turn's first record, after its first model call: the
	// turn's header carries the time of the message that started it.
	if e, ok := rec.Event.(*events.Event[events.TurnStarted]); ok {
		for _, m := range e.Data.Input {
			if m.Timestamp > 0 {
				return time.UnixMilli(m.Timestamp)
			}
		}
	}
	if rec.Event != nil {
		if m := rec.Event.EventMeta(); m.Time > 0 && rec.Kind != events.EvtKindTurnCommitted {
			return time.UnixMilli(m.Time)
		}
	}
	return rec.Time
}

func printRecord(w io.Writer, rec store.TurnRecord, deadByTurn map[string][]string) {
	ts := stamp(happened(rec))
	switch e := rec.Event.(type) {
	case *events.Event[events.TurnStarted]:
		fmt.Fprintf(w, "\n%s  ── turn %s (model %s/%s, worker %s)\n", ts, e.Data.Turn, e.Data.Model.Provider, e.Data.Model.ID, e.Data.Worker)
		for i := range e.Data.Input { // the prompts are recorded here, not as message_end
			its := ts
			if t := e.Data.Input[i].Timestamp; t > 0 {
				its = stamp(time.UnixMilli(t))
			}
			printMessage(w, its, &e.Data.Input[i])
		}
	case *events.Event[events.MessageEnd]:
		printMessage(w, ts, &e.Data.Message)
	case *events.Event[events.TurnCommitted]:
		cost := ""
		if e.Data.Usage != nil {
			cost = fmt.Sprintf(", %d in / %d out tokens, $%.6f", e.Data.Usage.Input, e.Data.Usage.Output, e.Data.Usage.Cost.Total)
		}
		if ids := deadByTurn[rec.Turn]; len(ids) > 0 {
			fmt.Fprintf(w, "%s  ✓ committed %d messages (context seq %d%s) — reply NOT delivered: dead letter %s\n", ts, e.Data.Messages, e.Data.LastSeq, cost, strings.Join(ids, ", "))
			break
		}
		fmt.Fprintf(w, "%s  ✓ committed %d messages (context seq %d%s)\n", ts, e.Data.Messages, e.Data.LastSeq, cost)
	case *events.Event[events.TurnFailed]:
		fmt.Fprintf(w, "%s  ✗ failed: %s %s\n", ts, e.Data.Reason, e.Data.Error)
	default:
		fmt.Fprintf(w, "%s  %s\n", ts, rec.Kind)
	}
}

func printMessage(w io.Writer, ts string, m *llm.Message) {
	switch m.Role {
	case llm.RoleUser:
		fmt.Fprintf(w, "%s  user: %s\n", ts, oneLine(m.TextContent()))
	case llm.RoleAssistant:
		for _, c := range m.Content {
			switch c.Type {
			case llm.ContentText:
				fmt.Fprintf(w, "%s  assistant: %s\n", ts, oneLine(c.Text))
			case llm.ContentThinking:
				fmt.Fprintf(w, "%s  (thinking) %s\n", ts, oneLine(c.Thinking))
			case llm.ContentToolCall:
				args, _ := json.Marshal(c.Arguments)
				fmt.Fprintf(w, "%s  → %s(%s) [%s]\n", ts, c.Name, args, c.ID)
			}
		}
		if m.StopReason == llm.StopReasonError || m.StopReason == llm.StopReasonAborted {
			fmt.Fprintf(w, "%s  (%s) %s\n", ts, m.StopReason, m.ErrorMessage)
		}
	case llm.RoleToolResult:
		mark := "←"
		if m.IsError {
			mark = "← error"
		}
		fmt.Fprintf(w, "%s  %s %s: %s\n", ts, mark, m.ToolName, oneLine(m.TextContent()))
	default:
		fmt.Fprintf(w, "%s  [%s]\n", ts, m.Role)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ⏎ ")
	if r := []rune(s); len(r) > 300 {
		return string(r[:300]) + "…"
	}
	return s
}
