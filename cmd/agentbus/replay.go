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

// cmdReplay prints a session's turns from AGENT_EVENTS: inputs, every message, tool calls and
// their results, commits and failures, in stream order.
func cmdReplay(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	bus := addBusFlags(fs)
	fromSeq := fs.Uint64("from-seq", 0, "start at this AGENT_EVENTS sequence")
	since := fs.Duration("since", 0, "start this long ago (e.g. 2h)")
	asJSON := fs.Bool("json", false, "print the raw events as JSON lines")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "agentbus replay — print a session's turns from the event log (AGENT_EVENTS): inputs, messages,\n"+
			"tool calls and results, commits and failures, in stream order.\n\nUsage:\n  agentbus replay [flags] platform:bot:scope:scene\n\nFlags:\n")
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
	from := store.ReplayFrom{Seq: *fromSeq}
	if *since > 0 {
		from.Time = time.Now().Add(-*since)
	}
	marks, err := contextMarks(ctx, js, sk, from.Time)
	if err != nil {
		return err
	}
	n := 0
	print := func(rec store.TurnRecord) {
		n++
		if *asJSON {
			b, _ := json.Marshal(rec.Event)
			fmt.Fprintln(w, string(b))
			return
		}
		printRecord(w, rec)
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
	for rec, err := range log.Replay(ctx, sk, from) {
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

// contextMarks reads the context logs of every epoch of sk (AGENT_CTX) for its compactions,
// leaf moves and closing commits.
func contextMarks(ctx context.Context, js jetstream.JetStream, sk events.SessionKey, since time.Time) ([]contextMark, error) {
	sessions, err := store.OpenSessions(ctx, js)
	if err != nil {
		return nil, err
	}
	sess, err := sessions.Get(ctx, sk)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cl, err := store.NewContextLog(ctx, js, store.ContextBounds{})
	if err != nil {
		return nil, err
	}
	var out []contextMark
	for epoch := uint64(1); epoch <= sess.Epoch; epoch++ {
		first := true
		for r, err := range cl.History(ctx, events.SessionID{Key: sk, Epoch: epoch}) {
			if err != nil {
				return nil, err
			}
			if first && epoch > 1 && !r.Time.Before(since) {
				out = append(out, contextMark{at: r.Time, text: fmt.Sprintf("\n%s  ══ epoch %d (context seq %d)", r.Time.Format("15:04:05.000"), epoch, r.Seq)})
			}
			first = false
			if r.Time.Before(since) {
				continue
			}
			for _, rec := range store.ClosingRecords(sk, events.SessionID{Key: sk, Epoch: epoch}, r) {
				out = append(out, contextMark{at: rec.Time, rec: &rec})
			}
			if l := r.Leaf; l != nil {
				text := fmt.Sprintf("%s  ↶ active leaf moved to context seq %d (context seq %d)", r.Time.Format("15:04:05.000"), l.LeafSeq, r.Seq)
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
				r.Time.Format("15:04:05.000"), s.Count, r.Seq, s.Covered, s.AnchorSeq, s.Model, oneLine(s.Text))})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out, nil
}

func printRecord(w io.Writer, rec store.TurnRecord) {
	ts := rec.Time.Format("15:04:05.000")
	switch e := rec.Event.(type) {
	case *events.Event[events.TurnStarted]:
		fmt.Fprintf(w, "\n%s  ── turn %s (model %s/%s, worker %s)\n", ts, e.Data.Turn, e.Data.Model.Provider, e.Data.Model.ID, e.Data.Worker)
		for i := range e.Data.Input { // the prompts are recorded here, not as message_end
			printMessage(w, ts, &e.Data.Input[i])
		}
	case *events.Event[events.MessageEnd]:
		printMessage(w, ts, &e.Data.Message)
	case *events.Event[events.TurnCommitted]:
		cost := ""
		if e.Data.Usage != nil {
			cost = fmt.Sprintf(", %d in / %d out tokens, $%.6f", e.Data.Usage.Input, e.Data.Usage.Output, e.Data.Usage.Cost.Total)
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
