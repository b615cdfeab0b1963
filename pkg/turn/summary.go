package turn

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/metrics"
)

// outcomeOf is a committed turn's outcome: iteration_limit when the model still asked for
// tools at the iteration limit (turnReply found it), failed when the model's last answer is an
// error, timeout or cancelled when it was aborted (by ai.agent.timeout, or by /cancel or a newer
// message), completed otherwise (also a run that reached the limit with an answer and a steer
// left for the next run: the loop's loop.ErrMaxIterations then, but the answer was given).
func (t *turnRun) outcomeOf(final *llm.Message) string {
	switch {
	case t.limitSteps > 0:
		return metrics.TurnIterationLimit
	case stopOf(final) == llm.StopReasonError:
		return metrics.TurnFailed
	case stopOf(final) == llm.StopReasonAborted && t.timedOut:
		return metrics.TurnTimeout
	case stopOf(final) == llm.StopReasonAborted:
		return metrics.TurnCancelled
	}
	return metrics.TurnCompleted
}

// finish counts the turn (agentbus_turns_total, agentbus_turn_duration_seconds) and logs its
// one summary line at info. A turn that ended without an outcome (err: the bus failed it, or
// the worker stopped after its commit) counts as failed.
func (t *turnRun) finish(err error) {
	outcome := t.outcome
	if outcome == "" {
		outcome = metrics.TurnFailed
	}
	// From the inbound message's acceptance by ingest (its event time) when the turn answers
	// one; otherwise (a schedule, a background result, a resume) from the turn's launch here.
	start := t.launched
	if t.accepted > 0 && !t.resumed {
		start = time.UnixMilli(t.accepted)
	}
	d := time.Since(start)
	t.a.w.opts.Metrics.Finished(outcome, d)
	if !t.a.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	var models []string
	var in, out, tools int
	var cost float64
	for i := range t.msgs {
		m := &t.msgs[i]
		switch m.Role {
		case llm.RoleAssistant:
			if ref := m.Provider + "/" + m.Model; m.Model != "" && !slices.Contains(models, ref) {
				models = append(models, ref)
			}
			if m.Usage != nil {
				in += m.Usage.Input + m.Usage.CacheRead + m.Usage.CacheWrite
				out += m.Usage.Output
				cost += m.Usage.Cost.Total
			}
		case llm.RoleToolResult:
			tools++
		}
	}
	args := []any{"turn", t.id, "trace", t.trace, "models", models, "tokens_in", in, "tokens_out", out,
		"cost_usd", cost, "tool_calls", tools, "duration", d.Round(time.Millisecond), "outcome", outcome}
	if t.limitSteps > 0 {
		args = append(args, "reason", fmt.Sprintf("iteration limit: the model still asked for tools after %d model calls", t.limitSteps))
	}
	if err != nil {
		args = append(args, "err", llm.Redact(err.Error(), t.a.w.opts.Secrets...))
	}
	t.a.log.Info("turn finished", args...)
}
