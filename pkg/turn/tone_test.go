package turn

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

func TestDetectTone(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"这个怎么还是不行", ToneFrustrated},
		{"It is STILL BROKEN AFTER YOUR FIX", ToneFrustrated},
		{"why does this fail???", ToneFrustrated},
		{"今天好难过，考试没过", ToneSad},
		{"urgent: the server is down", ToneUrgent},
		{"赶紧帮我看看这个报错", ToneUrgent},
		{"太好了，成功了 🎉", ToneHappy},
		{"hello there", ""},
		{"明天天气怎么样", ""},
		{"NASA and GPT", ""}, // a few capitals are no shouting
	} {
		if got := detectTone(tt.text); got != tt.want {
			t.Errorf("detectTone(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
}

// ai.agent.toneAwareness (default on) puts the tone of the user's message into the system
// prompt of the turn; off, or a message without a clear tone, adds nothing.
func TestToneAwarenessInSystemPrompt(t *testing.T) {
	seen := func(c *llm.Context) faux.Response {
		if i := strings.Index(c.SystemPrompt, "## Tone of the user's message\n"); i >= 0 {
			line, _, _ := strings.Cut(c.SystemPrompt[i+len("## Tone of the user's message\n"):], "\n")
			return faux.Response{Text: "tone: " + line}
		}
		return faux.Response{Text: "tone: none"}
	}
	for _, off := range []bool{false, true} {
		h := newHarness(t, func(o *Options) { o.NoToneHints = off }, faux.WithResponder(seen))
		h.worker("w1")
		k := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "private", Scene: "tone"}
		h.send(k, "m1", "这个怎么还是不行！！！")
		h.send(k, "m2", "明天天气怎么样")
		got := h.replies(k, 2)
		want0 := "tone: " + toneHints[ToneFrustrated]
		if off {
			want0 = "tone: none"
		}
		if got[0] != want0 || got[1] != "tone: none" {
			t.Errorf("toneAwareness off=%v: replies %q", off, got)
		}
	}
}
