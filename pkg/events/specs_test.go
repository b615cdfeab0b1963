package events

import "testing"

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
