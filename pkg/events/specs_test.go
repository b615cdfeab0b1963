package events

import (
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/nats-io/nats.go/jetstream"
)

func TestSpecFromConfig(t *testing.T) {
	s := SpecFromConfig(config.NATS{Replicas: 3, Storage: "memory", IMInMaxAgeMs: 1000, EventsMaxAgeMs: 60000, ToolResultsMaxAge: 5000})
	if s.Replicas != 3 || s.Storage != jetstream.MemoryStorage {
		t.Errorf("replicas/storage: %+v", s)
	}
	if s.IMInMaxAge != time.Second || s.EventsMaxAge != time.Minute || s.ToolResultsMaxAge != 5*time.Second {
		t.Errorf("ages: %+v", s)
	}
	for _, c := range s.Streams() {
		if c.Replicas != 3 || c.Storage != jetstream.MemoryStorage {
			t.Errorf("%s: replicas %d storage %v", c.Name, c.Replicas, c.Storage)
		}
		if c.MaxAge > 0 && c.Duplicates > c.MaxAge {
			t.Errorf("%s: duplicate window %s exceeds max age %s", c.Name, c.Duplicates, c.MaxAge)
		}
	}
	if got := s.IMInStream(); got.MaxAge != time.Second || got.Duplicates != time.Second {
		t.Errorf("IM_IN max age %s duplicates %s", got.MaxAge, got.Duplicates)
	}
	for _, c := range s.KeyValues() {
		if c.Replicas != 3 || c.Storage != jetstream.MemoryStorage {
			t.Errorf("kv %s: replicas %d storage %v", c.Bucket, c.Replicas, c.Storage)
		}
	}

	d := SpecFromConfig(config.NATS{})
	if d != DefaultSpec() || d.Replicas != 1 || d.Storage != jetstream.FileStorage {
		t.Errorf("defaults: %+v", d)
	}
}

func TestSpecStreamsCoverEverySubject(t *testing.T) {
	s := DefaultSpec()
	k := SessionKey{Platform: "p", Bot: "b", Scope: ScopeGroup, Scene: "s"}
	want := map[string]string{
		IMInSubject(k):                      StreamIMIn,
		AgentInSubject(k):                   StreamSessionIn,
		ScheduleSubject(k, "x"):             StreamSessionIn,
		AgentEvtSubject(k, "t", "x"):        StreamAgentEvents,
		AgentCtxSubject(NewSessionID(k, 1)): StreamAgentCtx,
		ToolCallSubject("x"):                StreamToolCalls,
		ToolResultSubject(k, "c"):           StreamToolResults,
		IMOutSubject(k):                     StreamIMOut,
		IMSentSubject(k):                    StreamIMSent,
		TaskSubagentSubject("x"):            StreamTasks,
		TaskDeferredSubject("x"):            StreamTasks,
		DeadLetterSubject("r", "x"):         StreamDeadLetters,
		AgentLiveSubject(k):                 "", // core NATS only
	}
	for subj, stream := range want {
		var got []string
		for _, c := range s.Streams() {
			for _, f := range c.Subjects {
				if subjectMatches(f, subj) {
					got = append(got, c.Name)
				}
			}
		}
		switch {
		case stream == "" && len(got) != 0:
			t.Errorf("%s is captured by %v, want no stream", subj, got)
		case stream != "" && (len(got) != 1 || got[0] != stream):
			t.Errorf("%s is captured by %v, want exactly %s", subj, got, stream)
		}
	}
}

// subjectMatches is a small NATS wildcard matcher for the test.
func subjectMatches(filter, subj string) bool {
	f, s := splitDots(filter), splitDots(subj)
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

func splitDots(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
