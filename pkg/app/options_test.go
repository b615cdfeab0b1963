package app

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/tasks"
)

// The YAML blocks reach the roles' typed Options unchanged in meaning: milliseconds become
// durations, the "enabled: true" style of the file becomes the roles' zero-is-default flags,
// and an explicit empty list stays empty (none) instead of taking the default.
func TestRoleOptionsFromConfig(t *testing.T) {
	tests := []struct {
		name       string
		yaml       string
		wantIngest ingest.Options
		wantEgress egress.Options
	}{
		{"defaults", ``,
			ingest.Options{Trigger: ingest.Trigger{Prefixes: []string{"ai:"}, IgnorePrefixes: ingest.DefaultIgnorePrefixes}},
			egress.Options{}},
		{"everything set", `
ai:
  trigger: {enabled: false, respondToPrivate: false, respondToAt: false, prefixes: [], ignorePrefixes: ["#"], masters: [m], trusted: [t]}
  dispatcher: {mode: dual, order: ai-first, allowDualReply: true}
im:
  egress: {concurrency: 4, ackWaitMs: 2500, maxRetries: 1, maxDeliveries: 3, rateLimits: {"*": {perSecond: 2, burst: 1}}}
`,
			ingest.Options{
				Trigger: ingest.Trigger{Off: true, PrivateNeedsPrefix: true, IgnoreMentions: true, Prefixes: []string{},
					IgnorePrefixes: []string{"#"}, Masters: []string{"m"}, Trusted: []string{"t"}},
				Dispatch: ingest.Dispatch{Dual: true, AIFirst: true, AllowDualReply: true}},
			egress.Options{Concurrency: 4, AckWait: 2500 * time.Millisecond, MaxRetries: 1, MaxDeliveries: 3,
				RateLimits: map[string]egress.RateLimit{"*": {PerSecond: 2, Burst: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := ingestOptions(cfg.AI, nil, nil); !reflect.DeepEqual(got, tt.wantIngest) {
				t.Errorf("ingest options\n got %+v\nwant %+v", got, tt.wantIngest)
			}
			if got := withEgressTuning(cfg.IM.Egress, egress.Options{}); !reflect.DeepEqual(got, tt.wantEgress) {
				t.Errorf("egress options\n got %+v\nwant %+v", got, tt.wantEgress)
			}
		})
	}
}

// ai.agent's background-task fields and ai.scheduler reach the task runner's Options as
// durations, with the heartbeat's period defaulted as the file documents it.
func TestTaskOptionsFromConfig(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want tasks.Options
	}{
		{"heartbeat period defaulted", `
ai:
  agent: {workspace: /srv/ws}
  scheduler:
    heartbeat: {session: "webhook:b1:private:boss"}
`, tasks.Options{MaxSubagentIterations: 25, ToolExecution: loop.Parallel, Workspace: "/srv/ws",
			Heartbeat: tasks.Heartbeat{Session: "webhook:b1:private:boss", Every: 30 * time.Minute}}},
		{"everything set", `
ai:
  agent: {workspace: /srv/ws, taskTimeoutMs: 3000, subagentTools: [echo], maxSubagentIterations: 7, toolExecution: sequential}
  scheduler:
    heartbeat: {session: "webhook:b1:private:boss", every: 2h, file: TODO.md, prompt: "look"}
    jobs:
      - {id: digest, session: "webhook:b1:group:team", cron: "0 0 9 * * *", timezone: Asia/Shanghai, prompt: "digest"}
      - {id: ping, session: "webhook:b1:group:team", every: 90s, prompt: "ping"}
`, tasks.Options{TaskTimeout: 3 * time.Second, SubagentTools: []string{"echo"}, MaxSubagentIterations: 7,
			ToolExecution: loop.Sequential, Workspace: "/srv/ws",
			Heartbeat: tasks.Heartbeat{Session: "webhook:b1:private:boss", Every: 2 * time.Hour, File: "TODO.md", Prompt: "look"},
			Jobs: []tasks.Job{
				{ID: "digest", Session: "webhook:b1:group:team", Cron: "0 0 9 * * *", TimeZone: "Asia/Shanghai", Prompt: "digest"},
				{ID: "ping", Session: "webhook:b1:group:team", Every: 90 * time.Second, Prompt: "ping"},
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			got, err := taskOptions(cfg.AI)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("task options\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
