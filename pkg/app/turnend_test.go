package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
)

// turnsTotal reads agentbus_turns_total{outcome} from the pipeline's process registry.
func (pl *pipeline) turnsTotal(outcome string) float64 {
	pl.t.Helper()
	mfs, err := pl.p.Metrics.Gatherer().Gather()
	if err != nil {
		pl.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "agentbus_turns_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestIterationLimitReplies is issue 37's tool chain that outlasts the iteration limit: the
// model asks for one more tool on every call. The turn stops at ai.agent.maxIterations (8 in
// the test pipeline) and the user is told so, with what the model last said; the turn counts
// as iteration_limit. Before, no reply reached the chat.
func TestIterationLimitReplies(t *testing.T) {
	logs := &turnEndLog{}
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if !r.HasTool("user_profile") {
			return fakeopenai.Echo(r)
		}
		n := 0
		for _, m := range r.Messages {
			n += len(m.ToolCalls)
		}
		return fakeopenai.Reply{Text: fmt.Sprintf("checking step %d", n+1), ToolCalls: []fakeopenai.ToolCall{
			{ID: fmt.Sprintf("call_%d", n+1), Name: "user_profile", Arguments: `{"action":"get","key":"city"}`}}}
	}, pipelineOpts{log: logs})
	pl.waitToolsServed()
	before := len(pl.model.Requests())
	pl.post(private("chain", "u1", "look up everything, step by step"))
	got := pl.repliesIn("u1", 1)
	text := got[0].Text()
	// The limit is maxIterations plus the harness's extra steps when skills are offered.
	n := len(pl.model.Requests()) - before
	if n < 8 || n > 12 {
		t.Fatalf("%d model calls for the turn, want the limit (8, or 11 with skills offered)", n)
	}
	if !strings.Contains(text, fmt.Sprintf("Stopped after %d steps", n)) || !strings.Contains(text, fmt.Sprintf("checking step %d", n)) || got[0].ReplyTo != "chain" {
		t.Fatalf("reply to a turn at the iteration limit after %d model calls: %q (replyTo %s)", n, text, got[0].ReplyTo)
	}
	testwait.Eventually(t, waitMargin, func() error {
		n := pl.turnsTotal("iteration_limit")
		return testwait.Want(n == 1, "agentbus_turns_total{outcome=\"iteration_limit\"} = %v, want 1", n)
	})
	time.Sleep(400 * time.Millisecond) // the window a second reply would show up in
	if rs := pl.cb.all(); len(rs) != 1+countScene(rs, "probe") {
		t.Fatalf("more than one reply in u1's chat: %s", fmtReplies(rs))
	}
	// The log says why: a warning, and the turn's summary line with its outcome and reason.
	var warned, finished bool
	for _, line := range strings.Split(logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch l["msg"] {
		case "turn stopped at the iteration limit":
			warned = l["level"] == "WARN" && l["model_calls"] == float64(n)
		case "turn finished":
			if l["outcome"] == "iteration_limit" {
				reason, _ := l["reason"].(string)
				finished = strings.Contains(reason, fmt.Sprintf("after %d model calls", n))
			}
		}
	}
	if !warned || !finished {
		t.Fatalf("log lacks the iteration limit (warning %v, turn finished with reason %v):\n%s", warned, finished, logs.String())
	}
}

// turnEndLog is a bytes.Buffer safe for the process's concurrent log writes.
type turnEndLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *turnEndLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *turnEndLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func countScene(rs []reply, sceneID string) int {
	n := 0
	for _, r := range rs {
		if r.Scene.ID == sceneID {
			n++
		}
	}
	return n
}

// TestFollowUpPostsBothAnswers is issue 37's /followup: a master's follow-up arrives while the
// turn's model call runs. The model answers the turn, then the follow-up, and its context holds
// both answers as said: both reach the chat, the turn's own first.
func TestFollowUpPostsBothAnswers(t *testing.T) {
	pl := newPipeline(t, slowFirst(time.Second, fakeopenai.Echo), pipelineOpts{})
	pl.post(private("story", master, "tell me a story"))
	pl.requests(1) // the turn is running (its first model call takes a while)
	pl.post(private("more", master, "/followup and then a poem"))
	got := pl.replies(2)
	pl.settle(2)
	if got[0].Text() != "echo: tell me a story" || got[1].Text() != "echo: and then a poem" {
		t.Fatalf("replies, want the turn's answer then the follow-up's: %s", fmtReplies(got))
	}
	rs := pl.model.Requests()
	if len(rs) != 2 || !rs[1].Contains("echo: tell me a story") || rs[1].LastUser() != "and then a poem" {
		t.Fatalf("%d model requests; the follow-up's should carry the first answer:\n%s", len(rs), rs[len(rs)-1].Text())
	}
}
