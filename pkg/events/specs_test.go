package events

import (
	"testing"
	"time"
)

func TestSpecStreamsCoverEverySubject(t *testing.T) {
	s := DefaultSpec()
	k := SessionKey{Platform: "p", Bot: "b", Scope: ScopeGroup, Scene: "s"}
	want := map[string]string{
		IMInSubject(k):                      StreamIMIn,
		AgentInSubject(k):                   StreamSessionIn,
		ScheduleSubject(k, "x"):             StreamSessionIn,
		AgentEvtSubject(k, "x"):             StreamAgentEvents,
		AgentEvtTurnSubject(k, "t", "x"):    StreamAgentEvents,
		AgentCtxSubject(NewSessionID(k, 1)): StreamAgentCtx,
		ToolCallSubject("x"):                StreamToolCalls,
		ToolResultSubject(k):                StreamToolResults,
		ToolResultCallSubject(k, "c"):       StreamToolResults,
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

// TestEveryStreamIsBounded: every stream, KV bucket and object store has a size or age bound
// (issue 41): a max age, a byte or message limit, or a per-subject limit (a KV bucket's history
// is one: it grows with keys, not with writes).
func TestEveryStreamIsBounded(t *testing.T) {
	bounded := func(maxAge time.Duration, maxBytes, maxMsgs, perSubject int64) bool {
		return maxAge > 0 || maxBytes > 0 || maxMsgs > 0 || perSubject > 0
	}
	s := DefaultSpec()
	for _, c := range s.Streams() {
		if !bounded(c.MaxAge, c.MaxBytes, c.MaxMsgs, c.MaxMsgsPerSubject) {
			t.Errorf("stream %s has no bound: MaxAge %v MaxBytes %d MaxMsgs %d MaxMsgsPerSubject %d",
				c.Name, c.MaxAge, c.MaxBytes, c.MaxMsgs, c.MaxMsgsPerSubject)
		}
	}
	for _, c := range s.KeyValues() {
		// A KV bucket's stream keeps History messages per key (MaxMsgsPerSubject), TTL max age.
		if !bounded(c.TTL, c.MaxBytes, 0, int64(c.History)) {
			t.Errorf("KV %s has no bound: TTL %v MaxBytes %d History %d", c.Bucket, c.TTL, c.MaxBytes, c.History)
		}
	}
	for _, c := range s.ObjectStores() {
		if !bounded(c.TTL, c.MaxBytes, 0, 0) {
			t.Errorf("object store %s has no bound", c.Bucket)
		}
	}
}
