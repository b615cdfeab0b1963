package turn

import (
	"os"

	"github.com/agentbus/agentbus/pkg/loop"
)

// PhaseTraceEnv turns phase tracing on like ai.agent.phaseTrace (the seed's variable name).
const PhaseTraceEnv = "ZHIN_AGENT_PHASE_TRACE"

// PhasePrefix starts every phase log line (seed: "日志前缀固定为 [AGENT_PHASE]").
const PhasePrefix = "[AGENT_PHASE]"

// phaseTracing reports whether turns log their phases: ai.agent.phaseTrace or
// ZHIN_AGENT_PHASE_TRACE=1.
func (w *Worker) phaseTracing() bool {
	return w.opts.PhaseTrace || os.Getenv(PhaseTraceEnv) == "1"
}

// phase logs one stable phase line of the turn when tracing is on: "[AGENT_PHASE] <phase>"
// with the session, the turn and attrs. The phases of a turn, in order: turn.start,
// tools.collected (tools=<n>), path.agent_loop (model=, maxIterations=), then per model call
// agent_loop.turn.start and agent_loop.turn.end (step=<n>), and turn.end (outcome=).
func (t *turnRun) phase(name string, attrs ...any) {
	w := t.a.w
	if !w.phaseTracing() {
		return
	}
	w.log.Info(PhasePrefix+" "+name, append([]any{"session", t.sidStr, "turn", t.id}, attrs...)...)
}

// phaseEmitter wraps emit so that the loop's turn_start / turn_end events become phase lines.
func (t *turnRun) phaseEmitter(emit func(loop.Event)) func(loop.Event) {
	if !t.a.w.phaseTracing() {
		return emit
	}
	step := 0
	return func(e loop.Event) {
		switch e.Type {
		case loop.EventTurnStart:
			step++
			t.phase("agent_loop.turn.start", "step", step)
		case loop.EventTurnEnd:
			t.phase("agent_loop.turn.end", "step", step)
		}
		emit(e)
	}
}
