package config

import (
	"strings"
	"time"
)

// Scheduler is ai.scheduler: background work the bus runs on JetStream message schedules.
//
//	ai:
//	  scheduler:
//	    heartbeat:
//	      session: "webhook:b1:private:boss"  # where the agent runs; empty = no heartbeat
//	      every: 30m                          # default 30m
//	      file: HEARTBEAT.md                  # relative to ai.agent.workspace
//	    jobs:
//	      - id: digest
//	        session: "webhook:b1:group:team"
//	        cron: "0 0 9 * * *"               # six fields, seconds first; or every: 24h
//	        timezone: Asia/Shanghai           # cron only
//	        prompt: "Post a digest of yesterday's discussion."
type Scheduler struct {
	Heartbeat Heartbeat `yaml:"heartbeat"`
	Jobs      []Job     `yaml:"jobs"`
}

// Heartbeat is ai.scheduler.heartbeat: HEARTBEAT.md is checked every Every; when it is not
// empty the agent runs Prompt (default: the seed's fixed heartbeat prompt) in Session.
type Heartbeat struct {
	Session string `yaml:"session"`
	Every   string `yaml:"every"`
	File    string `yaml:"file"`
	Prompt  string `yaml:"prompt"`
}

// DefaultHeartbeatEvery is the seed's heartbeat period.
const DefaultHeartbeatEvery = 30 * time.Minute

// Job is one ai.scheduler.jobs entry: Prompt runs in Session every Every or on Cron.
type Job struct {
	ID       string `yaml:"id"`
	Session  string `yaml:"session"`
	Every    string `yaml:"every"`
	Cron     string `yaml:"cron"`
	TimeZone string `yaml:"timezone"`
	Prompt   string `yaml:"prompt"`
}

// HeartbeatEvery is the heartbeat period (default DefaultHeartbeatEvery).
func (h Heartbeat) HeartbeatEvery() time.Duration {
	if d, err := time.ParseDuration(h.Every); err == nil && d > 0 {
		return d
	}
	return DefaultHeartbeatEvery
}

func validSessionKey(s string) bool {
	parts := strings.SplitN(s, ":", 4)
	return len(parts) == 4 && parts[0] != "" && parts[1] != "" && parts[3] != "" &&
		(parts[2] == "private" || parts[2] == "group" || parts[2] == "channel")
}

func validEvery(s string) bool {
	d, err := time.ParseDuration(s)
	return err == nil && d >= time.Second
}

func (s Scheduler) validate(bad func(string, ...any)) {
	if h := s.Heartbeat; h.Session != "" || h.Every != "" {
		if !validSessionKey(h.Session) {
			bad("ai.scheduler.heartbeat.session %q: want platform:bot:private|group|channel:scene", h.Session)
		}
		if h.Every != "" && !validEvery(h.Every) {
			bad("ai.scheduler.heartbeat.every %q: want a duration of at least 1s (30m, 2h)", h.Every)
		}
	}
	seen := map[string]bool{}
	for i, j := range s.Jobs {
		switch {
		case j.ID == "" || strings.ContainsAny(j.ID, " .*>"):
			bad("ai.scheduler.jobs[%d].id %q: required, without spaces, dots, * or >", i, j.ID)
		case seen[j.ID]:
			bad("ai.scheduler.jobs[%d].id %q is used twice", i, j.ID)
		}
		seen[j.ID] = true
		if !validSessionKey(j.Session) {
			bad("ai.scheduler.jobs[%d].session %q: want platform:bot:private|group|channel:scene", i, j.Session)
		}
		switch {
		case (j.Every == "") == (j.Cron == ""):
			bad("ai.scheduler.jobs[%d]: set exactly one of every and cron", i)
		case j.Every != "" && !validEvery(j.Every):
			bad("ai.scheduler.jobs[%d].every %q: want a duration of at least 1s", i, j.Every)
		case j.Cron != "" && !strings.HasPrefix(j.Cron, "@") && len(strings.Fields(j.Cron)) != 6:
			bad("ai.scheduler.jobs[%d].cron %q: want six fields (second minute hour day month weekday) or @daily, @hourly, ...", i, j.Cron)
		}
		if j.TimeZone != "" {
			if _, err := time.LoadLocation(j.TimeZone); err != nil {
				bad("ai.scheduler.jobs[%d].timezone %q: %v", i, j.TimeZone, err)
			} else if j.Cron == "" {
				bad("ai.scheduler.jobs[%d].timezone applies to cron schedules only", i)
			}
		}
		if strings.TrimSpace(j.Prompt) == "" {
			bad("ai.scheduler.jobs[%d].prompt is required", i)
		}
	}
}
