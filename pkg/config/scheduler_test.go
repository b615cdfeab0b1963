package config

import (
	"fmt"
	"strings"
	"testing"
)

func TestSchedulerValidate(t *testing.T) {
	tests := []struct {
		name string
		s    Scheduler
		want []string // substrings of the errors; none = valid
	}{
		{"empty", Scheduler{}, nil},
		{"heartbeat ok", Scheduler{Heartbeat: Heartbeat{Session: "qq:b:private:u", Every: "45m"}}, nil},
		{"heartbeat bad session", Scheduler{Heartbeat: Heartbeat{Session: "qq:b:room:u"}}, []string{"heartbeat.session"}},
		{"heartbeat bad every", Scheduler{Heartbeat: Heartbeat{Session: "qq:b:group:g", Every: "soon"}}, []string{"heartbeat.every"}},
		{"job ok", Scheduler{Jobs: []Job{{ID: "digest", Session: "qq:b:group:g", Cron: "0 0 9 * * *", TimeZone: "Asia/Shanghai", Prompt: "p"}}}, nil},
		{"job both", Scheduler{Jobs: []Job{{ID: "d", Session: "qq:b:group:g", Cron: "@daily", Every: "1h", Prompt: "p"}}}, []string{"exactly one of every and cron"}},
		{"job five-field cron", Scheduler{Jobs: []Job{{ID: "d", Session: "qq:b:group:g", Cron: "0 9 * * *", Prompt: "p"}}}, []string{"six fields"}},
		{"job duplicate, no prompt, bad tz", Scheduler{Jobs: []Job{
			{ID: "d", Session: "qq:b:group:g", Every: "1h", Prompt: "p"},
			{ID: "d", Session: "qq:b:group:g", Cron: "@hourly", TimeZone: "Mars/Base"},
		}}, []string{"used twice", "prompt is required", "timezone"}},
		{"job id with a dot", Scheduler{Jobs: []Job{{ID: "a.b", Session: "qq:b:group:g", Every: "1h", Prompt: "p"}}}, []string{"jobs[0].id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errs []string
			tt.s.validate(func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) })
			all := strings.Join(errs, "\n")
			if len(tt.want) == 0 && len(errs) > 0 {
				t.Fatalf("unexpected errors: %s", all)
			}
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("errors %q lack %q", all, w)
				}
			}
		})
	}
	if d := (Heartbeat{}).HeartbeatEvery(); d != DefaultHeartbeatEvery {
		t.Errorf("default heartbeat period %s", d)
	}
}
