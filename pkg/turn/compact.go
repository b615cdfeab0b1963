package turn

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/compaction"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/store"
)

// Compaction in the turn worker (see pkg/compaction and docs/compaction.md):
//
//   - L1 runs as the loop's TransformContext on every model call (microCompact).
//   - L2 runs before a turn's first model call when the loaded context nears the window
//     (autoCompact), on /compact, and after a context overflow (retryOverflow), always through
//     compactContext: one compaction at a time per actor, summarizing outside the commit lock
//     and committing the summary as one fenced AGENT_CTX record. A crash before that record
//     leaves the context as it was (nothing half-written: the record is the commit); after it,
//     every later load starts from the summary, so the span is never summarized twice.

// errStillFits: by the time a compaction got its turn, another one had already made room.
var errStillFits = errors.New("turn: context fits after an earlier compaction")

// overflowReply is what the user reads when the context overflows even after compaction.
const overflowReply = "this conversation no longer fits the model's context window, even after compacting it. " +
	"Send /compact to summarize more of it, or /reset to start a new conversation (chat history is kept)."

// compactionSettings are Options.Compaction (ai.agent.compaction) for model m.
func (w *Worker) compactionSettings(m *llm.Model) compaction.Settings {
	c := w.opts.Compaction
	s := compaction.Settings{
		Enabled: !c.Disabled, Auto: !c.NoAuto,
		KeepRecentTokens: c.KeepRecentTokens, MinKeepCount: c.MinKeepCount, ReserveTokens: c.ReserveTokens,
	}
	if m != nil {
		s.ContextWindow = m.ContextWindow
	}
	if s.ContextWindow <= 0 {
		s.ContextWindow = w.opts.ContextTokens // ai.agent.contextTokens: the window when the model's is unknown
	}
	s = s.Effective()
	// What is kept must leave room below the history-share trigger, or every turn would
	// compact again.
	if share := w.opts.MaxHistoryShare; share > 0 && share < 1 {
		s.KeepRecentTokens = max(1, min(s.KeepRecentTokens, int(share*float64(s.ContextWindow))/2))
	}
	s.SummaryTokens = min(maxSummaryTokens, max(minSummaryTokens, s.KeepRecentTokens/2))
	return s
}

// The length a summary is asked to stay under: a quarter of the history budget, within these
// bounds (a 2,048-token summary is about 1,500 words, plenty for the sections it has).
const (
	minSummaryTokens = 64
	maxSummaryTokens = 2048
)

// afterCompaction returns s with the cut and the summary's target sized so that what a
// compaction leaves (the summary and the messages kept) is about half of budget, the history
// tokens at which the automatic compaction ran. The next one is then half a budget of new
// messages away, instead of one turn (issue 37: keeping a fixed budget that did not count the
// summary, the system prompt and the tools compacted on almost every turn of a small window).
func afterCompaction(s compaction.Settings, budget int) compaction.Settings {
	if budget <= 0 {
		// The system prompt, the tools and the new input alone fill the window: keep the fewest
		// messages; the overflow path has the last word.
		s.KeepRecentTokens = 1
		s.SummaryTokens = minSummaryTokens
		return s
	}
	s.SummaryTokens = min(maxSummaryTokens, max(minSummaryTokens, budget/4))
	s.KeepRecentTokens = max(1, min(s.KeepRecentTokens, budget/2-s.SummaryTokens))
	return s
}

// autoTrigger says whether the context a turn would send should be compacted first, why, and
// with which settings to cut:
//   - "window": the whole prompt nears the window (compaction.auto, reserveTokens);
//   - "history share": the history (summary and messages) exceeds ai.agent.maxHistoryShare of
//     the window;
//   - "history length": more messages than ai.sessions.maxHistory (or, with ai.context.enabled
//     set to true, ai.context.summaryThreshold), or as many as the log's load bound
//     (ai.sessions.coldStartMaxMessages); the cut then keeps half of that many messages
//     (ai.context.keepAfterSummary with ai.context.enabled: true; at least compaction.minKeepCount)
//     whatever their size;
//   - "history tokens": with ai.context.enabled: true, a history above ai.context.maxContextTokens.
//
// For "window" and "history share" the history budget is what the history may take before
// either fires: the threshold less what the system prompt, the tools and the new input take
// (the reported usage counts them), and at most the history share. A compaction leaves about
// half of it (afterCompaction). The history itself is estimated from its text only: usage
// counts the system prompt and the tools too, and must not be taken for history.
//
// est (may be nil) remembers the estimates of the session's messages from earlier calls.
func (w *Worker) autoTrigger(est *compaction.Estimator, m *llm.Model, l store.Loaded, system string, input []llm.Message) (compaction.Settings, string, bool) {
	s := w.compactionSettings(m)
	if !s.Enabled || !s.Auto {
		return s, "", false
	}
	total := contextTokens(est, l, system, input)
	history := est.Estimate(contextMessages(l))
	budget, shareCap := 0, 0
	if th := s.Threshold(); th > 0 {
		budget = th - max(0, total-history)
	}
	if share := w.opts.MaxHistoryShare; share > 0 && share < 1 && s.ContextWindow > 0 {
		shareCap = int(share * float64(s.ContextWindow))
		budget = min(budget, shareCap)
	}
	if s.ShouldCompact(total) {
		return afterCompaction(s, budget), "window", true
	}
	if shareCap > 0 && history > shareCap {
		return afterCompaction(s, budget), "history share", true
	}
	cx := w.opts.History.Legacy
	legacy := cx.Enabled
	limit := w.opts.History.MaxHistory
	if legacy && cx.SummaryThreshold > 0 && (limit <= 0 || cx.SummaryThreshold < limit) {
		limit = cx.SummaryThreshold
	}
	// The context log loads at most coldStartMaxMessages: a load that reaches that bound may
	// already leave messages out, so it is summarized before more fall out unsummarized.
	if cold := w.opts.History.ColdStartMaxMessages; cold > 1 && (limit <= 0 || cold-1 < limit) {
		limit = cold - 1
	}
	if limit > 0 && len(l.Messages) > limit {
		byCount := s
		byCount.KeepRecentTokens = 1
		keep := max(s.MinKeepCount, limit/2) // half the history stays verbatim
		if legacy && cx.KeepAfterSummary > 0 {
			keep = max(s.MinKeepCount, cx.KeepAfterSummary)
		}
		byCount.MinKeepCount = min(keep, limit)
		return byCount, "history length", true
	}
	if legacy && cx.MaxContextTokens > 0 && history > cx.MaxContextTokens {
		byTokens := s
		byTokens.KeepRecentTokens = min(s.KeepRecentTokens, cx.MaxContextTokens/2)
		return byTokens, "history tokens", true
	}
	return s, "", false
}

// historyBound is the most messages a turn loads after the summary (ai.sessions.maxHistory and
// ai.context.maxRecentMessages, the smaller): the safety net when compaction could not run.
func (w *Worker) historyBound() int {
	n := w.opts.History.MaxHistory
	if m := w.opts.History.Legacy.MaxRecentMessages; m > 0 && (n <= 0 || m < n) {
		n = m
	}
	return n
}

// boundHistory keeps the newest historyBound messages of l, never starting at a tool result.
func (w *Worker) boundHistory(l store.Loaded) store.Loaded {
	n := w.historyBound()
	if n <= 0 || len(l.Messages) <= n {
		return l
	}
	i := len(l.Messages) - n
	for i < len(l.Messages) && l.Messages[i].Role == llm.RoleToolResult {
		i++
	}
	l.Messages, l.Seqs = l.Messages[i:], l.Seqs[i:]
	return l
}

// summaryModel is ai.agent.compaction.model ("provider/model") or else the turn's model.
func (w *Worker) summaryModel(turnModel *llm.Model) *llm.Model {
	if ref := w.opts.Compaction.Model; ref != "" {
		if p, id, ok := strings.Cut(ref, "/"); ok {
			if m, err := w.opts.Models.GetModel(p, id); err == nil {
				return m
			}
		}
		w.log.Warn("compaction.model not found; summarizing with the turn's model", "model", ref)
	}
	return turnModel
}

func (w *Worker) streamFunc() compaction.StreamFunc {
	if w.opts.StreamFn != nil {
		return compaction.StreamFunc(w.opts.StreamFn)
	}
	return llm.Stream
}

// contextMessages is what the model sees of a loaded context: the summary (as a user message
// that says what it is) followed by the messages after its anchor.
func contextMessages(l store.Loaded) []llm.Message {
	if l.Summary == nil {
		return l.Messages
	}
	sum := llm.UserText("[summary of the earlier conversation]\n"+l.Summary.Text, l.Summary.Time.UnixMilli())
	return append([]llm.Message{sum}, l.Messages...)
}

// contextTokens estimates the prompt a turn sends: the larger of the last reported usage (plus
// what came after it) and an estimate of the system prompt, summary, messages and input. Usage
// reported before the latest summary was written counts the prompt as it was before it, so only
// messages after the summary record are asked. e (may be nil) memoizes the message estimates.
func contextTokens(e *compaction.Estimator, l store.Loaded, system string, input []llm.Message) int {
	est := e.Estimate(contextMessages(l)) + len(system)/4 + compaction.Estimate(input)
	fresh := l.Messages
	if l.Summary != nil && len(l.Seqs) == len(l.Messages) {
		k := 0
		for k < len(l.Seqs) && l.Seqs[k] < l.Summary.Seq {
			k++
		}
		fresh = l.Messages[k:]
	}
	if u, ok := compaction.UsageTokens(fresh); ok {
		return max(u+compaction.Estimate(input), est)
	}
	return est
}

// microCompact is L1 as a TransformContext: placeholders for old tool results, oversized blocks
// shortened. Only the model call sees it; the turn's messages and the log stay whole.
func (t *turnRun) microCompact(s compaction.Settings) func(context.Context, []llm.Message) ([]llm.Message, error) {
	return func(_ context.Context, msgs []llm.Message) ([]llm.Message, error) {
		return compaction.Micro(msgs, compaction.MicroOptions{KeepRecentTokens: s.KeepRecentTokens, MaxBlockBytes: s.ContextWindow, Estimator: &t.a.est}), nil
	}
}

// compactOutcome describes a committed compaction.
type compactOutcome struct {
	covered, kept int // messages summarized (this time) and kept verbatim
	restored      int // identifiers the summary had dropped and got back
	count         int // compactions of this epoch so far
	seq           uint64
	before, after int // estimated context tokens
}

// compactContext summarizes the older part of the session id's context and commits the summary.
// need, when set, is checked once this compaction holds the actor's compaction lock: a turn that
// waited behind another compaction finds the context small enough and returns errStillFits.
// It returns compaction.ErrNothingToCompact when no cut is possible, ErrSummaryFailed (nothing
// committed) when the model fails, and store.ErrStaleWriter when the session moved to another
// owner meanwhile (nothing committed either).
//
// before, when set, runs once the cut is known and before the summary is written (the memory
// flush): it is not run for a compaction that does not happen.
func (co contextOps) compactContext(ctx context.Context, sid events.SessionID, turnModel *llm.Model, s compaction.Settings, instructions, reason string, need func(store.Loaded) bool, before func(store.Loaded)) (compactOutcome, error) {
	a := co.a
	a.compactMu.Lock()
	defer a.compactMu.Unlock()
	loaded, err := a.cx.loadContext(ctx, sid)
	if err != nil {
		return compactOutcome{}, err
	}
	if need != nil && !need(loaded) {
		return compactOutcome{}, errStillFits
	}
	msgs := loaded.Messages
	cut := compaction.FindCut(msgs, s, func(k int) bool { return loaded.Seqs[k-1] != loaded.Seqs[k] })
	if cut == 0 {
		return compactOutcome{}, compaction.ErrNothingToCompact
	}
	if before != nil {
		before(loaded)
	}
	model := a.w.summaryModel(turnModel)
	prev, prevCount, prevCovered, prevSeq := "", 0, 0, uint64(0)
	if loaded.Summary != nil {
		prev, prevCount, prevCovered, prevSeq = loaded.Summary.Text, loaded.Summary.Count, loaded.Summary.Covered, loaded.Summary.Seq
	}
	res, err := compaction.Summarize(ctx, compaction.Request{
		Model: model, Stream: a.w.streamFunc(), Previous: prev, Messages: msgs[:cut], Instructions: instructions,
		TargetTokens: s.SummaryTokens,
		Options:      &llm.StreamOptions{APIKey: a.w.opts.Models.APIKey(model.Provider), SessionID: sid.String()},
	})
	if err != nil {
		return compactOutcome{}, err
	}
	sum := store.Summary{Text: res.Text, AnchorSeq: loaded.Seqs[cut-1], Covered: prevCovered + cut, Model: model.Provider + "/" + model.ID, Count: prevCount + 1}
	// The msg id names the span (anchor) and what it replaces (the previous summary): a retried
	// append of this very summary is answered with the first one's sequence.
	msgID := fmt.Sprintf("sum:%s:%d:%d", sid, sum.AnchorSeq, prevSeq)
	seq, err := a.cx.commitSummary(ctx, sid, loaded.LastSeq, sum, msgID)
	if err != nil {
		return compactOutcome{}, err
	}
	after := loaded
	sum.Seq = seq
	after.Summary, after.Messages, after.Seqs = &sum, msgs[cut:], loaded.Seqs[cut:]
	out := compactOutcome{covered: cut, kept: len(msgs) - cut, restored: len(res.Restored), count: sum.Count, seq: seq,
		before: contextTokens(nil, loaded, "", nil), after: contextTokens(nil, after, "", nil)}
	a.hk.sessionCompactHook(sid.String(), msgID, sum.Text, reason, out.covered, out.kept) // hooks.go
	a.log.Info("context compacted", "reason", reason, "summarized", out.covered, "kept", out.kept, "restored_ids", out.restored,
		"tokens_before", out.before, "tokens_after", out.after, "anchor", sum.AnchorSeq, "seq", seq, "compactions", sum.Count)
	return out, nil
}

// commitSummary appends s fenced on the log's last sequence as this actor knows it (turns that
// committed while the summary was written only moved it on; their messages come after the
// anchor and stay), serialized with the actor's message commits.
func (co contextOps) commitSummary(ctx context.Context, sid events.SessionID, loadedLast uint64, s store.Summary, msgID string) (uint64, error) {
	a := co.a
	if err := a.own.AwaitFence(ctx, a); err != nil {
		return 0, fmt.Errorf("commit summary %s: %w", sid, err)
	}
	a.commit.Lock()
	defer a.commit.Unlock()
	key := sid.String()
	last, ok := a.ctxLast[key]
	if !ok || last < loadedLast {
		last = loadedLast
	}
	seq, err := a.w.ctxlog.AppendSummary(ctx, sid, last, s, store.WithMsgID(msgID))
	if err != nil {
		return 0, fmt.Errorf("commit summary %s: %w", key, err)
	}
	if !ok {
		a.w.ctxlog.Keep(sid)
		a.kept = append(a.kept, sid)
	}
	a.ctxLast[key] = seq
	return seq, nil
}

// autoCompact runs L2 before the turn's first model call when the context it would send nears
// the window (compaction.auto), after the memory flush, and returns the context to use. A
// failed compaction is logged and the turn goes on with the context as it was (the overflow
// path still has a chance).
func (t *turnRun) autoCompact(ctx context.Context, loaded store.Loaded, system string) store.Loaded {
	a := t.a
	s, reason, ok := a.w.autoTrigger(&a.est, t.model, loaded, system, t.input)
	if !ok {
		return a.w.boundHistory(loaded)
	}
	need := func(l store.Loaded) bool {
		_, _, ok := a.w.autoTrigger(&a.est, t.model, l, system, t.input)
		return ok
	}
	flush := func(l store.Loaded) { a.cx.memoryFlush(ctx, t, l, system) }
	_, err := a.cx.compactContext(ctx, t.sid, t.model, s, "", "auto: "+reason, need, flush)
	switch {
	case errors.Is(err, errStillFits), err == nil:
	case errors.Is(err, compaction.ErrNothingToCompact):
		return a.w.boundHistory(loaded)
	default:
		a.log.Warn("auto compaction failed; the turn goes on uncompacted", "turn", t.id, "provider", t.model.Provider, "model", t.model.ID, "err", err)
		return a.w.boundHistory(loaded)
	}
	l, err := a.cx.loadContext(ctx, t.sid)
	if err != nil {
		return a.w.boundHistory(loaded)
	}
	return a.w.boundHistory(l)
}

// runCompacting runs the loop (fresh or resumed) and, when the model reports a context
// overflow (an overflow error of any provider, or usage above the window), compacts and
// continues once from the turn's own messages. A second overflow ends the turn with a clear
// message instead of the provider's error.
func (t *turnRun) runCompacting(ctx context.Context, ac *loop.AgentContext, cfg *loop.Config, emit func(loop.Event), run func() ([]llm.Message, error)) ([]llm.Message, error) {
	out, err := run()
	final := lastAssistant(out)
	// Silent overflow only against the window the model declares: the contextTokens fallback
	// is a guess, and a model with a larger window must not be judged by it.
	window := t.model.ContextWindow
	if err != nil || !llm.IsContextOverflow(final, window) || len(final.ToolCalls()) > 0 {
		return out, err
	}
	s := t.a.w.compactionSettings(t.model)
	if !s.Enabled {
		markOverflow(final)
		return out, nil
	}
	t.a.log.Warn("context overflow; compacting and retrying once", "turn", t.id, "provider", t.model.Provider, "model", t.model.ID, "err", final.ErrorMessage)
	_, cerr := t.a.cx.compactContext(ctx, t.sid, t.model, s, "", "overflow", nil, nil)
	if cerr != nil && !errors.Is(cerr, compaction.ErrNothingToCompact) {
		t.a.log.Warn("overflow compaction failed", "turn", t.id, "provider", t.model.Provider, "model", t.model.ID, "err", cerr)
	}
	loaded, lerr := t.a.cx.loadContext(ctx, t.sid)
	if lerr != nil {
		markOverflow(final)
		return out, nil
	}
	// Forget the overflowed answer: its message_end is not recorded (it waits in the tail for
	// the commit), and the retry takes its index.
	t.dropTail(len(out) - 1)
	own := out[:len(out)-1]
	ac.Messages = append(append([]llm.Message(nil), contextMessages(t.a.w.boundHistory(loaded))...), own...)
	more, err := loop.Continue(ctx, ac, cfg, emit)
	out = append(own[:len(own):len(own)], more...)
	if f := lastAssistant(out); err == nil && llm.IsContextOverflow(f, window) && len(f.ToolCalls()) == 0 {
		markOverflow(f)
	}
	return out, err
}

// overflowText is the reply to a turn that overflowed even after compaction: what to do, for
// everyone; the provider's error only for masters, scrubbed (as failureText does).
func overflowText(to events.Sender, errorMessage string) string {
	text := "⚠️ The model failed: " + overflowReply
	detail := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(errorMessage, overflowReply), " ("), ")")
	if to.HasRole(events.RoleMaster) && strings.TrimSpace(detail) != "" {
		text += " (" + scrubForUser(detail) + ")"
	}
	return text
}

// markOverflow turns an overflowed answer into a failure the user can act on.
func markOverflow(m *llm.Message) {
	detail := m.ErrorMessage
	m.StopReason = llm.StopReasonError
	m.ErrorMessage = overflowReply
	if detail != "" {
		m.ErrorMessage += " (" + detail + ")"
	}
}

// dropTail removes the held-back message_end of loop index idx (see emitter) and makes idx the
// next index again.
func (t *turnRun) dropTail(idx int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, me := range t.tail {
		if me.Index == idx {
			t.tail = append(t.tail[:i], t.tail[i+1:]...)
			break
		}
	}
	if t.index > idx {
		t.index = idx
	}
}
