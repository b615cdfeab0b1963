package app

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/tasks"
	"github.com/agentbus/agentbus/pkg/toolworker"
	"github.com/agentbus/agentbus/pkg/turn"
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

// The ai: block reaches turn.Options unchanged in meaning. With no key set every field holds
// pkg/turn's own default, so the defaults docs/configuration.md gives (pkg/config's) and the
// ones a worker built without a file gets (turn.Default*) cannot drift apart.
func TestTurnOptionsFromConfig(t *testing.T) {
	defaults := turn.Options{
		Agents: map[string]turn.Binding{}, ToolTimeout: turn.DefaultToolTimeout, TurnTimeout: turn.DefaultTurnTimeout,
		PreExecTimeout: turn.DefaultPreExecTimeout, Concurrency: turn.DefaultConcurrency, CollectWindow: turn.DefaultCollectWindow,
		SteeringMode: turn.DefaultQueueMode, FollowUpMode: turn.DefaultQueueMode, Workspace: "./data/workspace",
		ContextTokens: turn.DefaultContextTokens, MaxHistoryShare: turn.DefaultMaxHistoryShare,
		Compaction: turn.Compaction{KeepRecentTokens: turn.DefaultKeepRecentTokens, MinKeepCount: turn.DefaultMinKeepCount,
			ReserveTokens: turn.DefaultReserveTokens},
		History: turn.History{MaxHistory: turn.DefaultMaxHistory, ColdStartMaxMessages: turn.DefaultMaxHistory,
			ColdStartMaxAge: turn.DefaultColdStartMaxAge, IdleArchive: turn.DefaultSessionIdleArchive, Expire: turn.DefaultSessionExpire,
			Legacy: turn.LegacyContext{MaxRecentMessages: turn.DefaultMaxRecentMessages, SummaryThreshold: turn.DefaultSummaryThreshold,
				KeepAfterSummary: turn.DefaultKeepAfterSummary, MaxContextTokens: turn.DefaultLegacyMaxContextTokens}},
	}
	tests := []struct {
		name string
		yaml string
		want turn.Options
	}{
		{"defaults", ``, defaults},
		{"everything set", `
ai:
  providers:
    p: {api: faux}
  agents:
    vision: {provider: p, model: v, priority: 2, match: {hasMedia: [image]}}
  sessions: {maxHistory: -1, coldStartMaxMessages: 40, coldStartMaxAgeMs: 60000, sessionIdleArchiveMs: -1, expireMs: 3600000}
  context: {enabled: true, maxRecentMessages: 30, summaryThreshold: 20, keepAfterSummary: 5, maxContextTokens: 900}
  mcpServers:
    b: {command: x}
    a: {command: y}
    off: {command: z, disabled: true}
  agent:
    timeout: 5000
    preExecTimeout: 700
    toolTimeoutMs: 9000
    concurrency: collect
    collectWindowMs: 250
    steeringMode: all
    followUpMode: all
    workspace: /w
    phaseTrace: true
    toneAwareness: false
    rateLimit: {perMinute: 1, perHour: 2, perDay: 3, includeMasters: true}
    contextTokens: 8000
    maxHistoryShare: 0.25
    compaction: {enabled: false, auto: false, keepRecentTokens: 100, minKeepCount: 3, reserveTokens: 50, model: p/m, memoryFlush: false}
`, turn.Options{
			Agents:      map[string]turn.Binding{"vision": {Provider: "p", Model: "v", Priority: 2, HasMedia: []string{"image"}}},
			ToolTimeout: 9 * time.Second, TurnTimeout: 5 * time.Second, PreExecTimeout: 700 * time.Millisecond,
			Concurrency: "collect", CollectWindow: 250 * time.Millisecond, SteeringMode: "all", FollowUpMode: "all",
			Workspace: "/w", PhaseTrace: true, NoToneHints: true,
			RateLimit:     turn.RateLimit{PerMinute: 1, PerHour: 2, PerDay: 3, IncludeMasters: true},
			ContextTokens: 8000, MaxHistoryShare: 0.25,
			Compaction: turn.Compaction{Disabled: true, NoAuto: true, KeepRecentTokens: 100, MinKeepCount: 3, ReserveTokens: 50,
				Model: "p/m", NoMemoryFlush: true},
			History: turn.History{MaxHistory: -1, ColdStartMaxMessages: 40, ColdStartMaxAge: time.Minute, IdleArchive: -time.Millisecond,
				Expire: time.Hour, Legacy: turn.LegacyContext{Enabled: true, MaxRecentMessages: 30, SummaryThreshold: 20,
					KeepAfterSummary: 5, MaxContextTokens: 900}},
			MCPServers: []string{"a", "b"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if tw := toolWorkerOptions(cfg.AI).DefaultTimeout; tw != tt.want.ToolTimeout {
				t.Errorf("tool worker DefaultTimeout %v, want %v (the turn worker's ToolTimeout: both are ai.agent.toolTimeoutMs)", tw, tt.want.ToolTimeout)
			}
			if tt.name == "defaults" && turn.DefaultToolTimeout != toolworker.DefaultTimeout {
				t.Errorf("turn.DefaultToolTimeout %v, toolworker.DefaultTimeout %v: one key, one default", turn.DefaultToolTimeout, toolworker.DefaultTimeout)
			}
			got := turnOptions(cfg.AI, nil)
			if got.Route == nil || got.Harness == nil {
				t.Fatal("turnOptions left Route or Harness nil")
			}
			got.Route, got.Harness = nil, nil // functions: checked below
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("turn options\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Routing and the per-model harness reach the turn worker through pkg/models: the binding's
// model for a text turn, and the modelHarness entry of that model over ai.agent.
func TestTurnOptionsRouteAndHarness(t *testing.T) {
	cfg, err := config.Parse([]byte(`
ai:
  providers:
    demo: {api: faux, models: [demo-1, demo-2]}
  agents:
    zhin: {provider: demo, model: demo-2}
  agent:
    maxIterations: 9
    modelHarness:
      models:
        demo-2: {maxTools: 3, alwaysTools: [clock], toolExecution: sequential}
`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := models.NewRegistry(cfg.AI.Providers)
	if err != nil {
		t.Fatal(err)
	}
	o := turnOptions(cfg.AI, reg)
	m, err := o.Route(nil)
	if err != nil || m.Provider+"/"+m.ID != "demo/demo-2" {
		t.Fatalf("Route(nil) = %v, %v; want demo/demo-2", m, err)
	}
	h := o.Harness("demo", "demo-2")
	if h.MaxIterations != 9 || h.MaxTools != 3 || !reflect.DeepEqual(h.AlwaysTools, []string{"clock"}) || h.ToolExecution != "sequential" || h.ModelSize == "" {
		t.Errorf("Harness(demo, demo-2) = %+v; want maxIterations 9 (ai.agent), maxTools 3, alwaysTools [clock], sequential (modelHarness), a model size", h)
	}
}

// im.webhook reaches the webhook adapter's options: seconds become a duration, and with no key
// set every limit holds ingest's own default.
func TestWebhookOptionsFromConfig(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       ingest.WebhookOptions
	}{
		{"defaults", ``, ingest.WebhookOptions{Secrets: map[string]string{}, Tolerance: ingest.DefaultWebhookTolerance,
			MaxBodyBytes: ingest.DefaultMaxBodyBytes, MaxInFlight: ingest.DefaultMaxInFlight, MaxInFlightBytes: ingest.DefaultMaxInFlightBytes,
			PerBot:     ingest.RateLimit{PerSecond: ingest.DefaultPerBotPerSecond, Burst: ingest.DefaultPerBotBurst},
			PerSender:  ingest.RateLimit{PerSecond: ingest.DefaultPerSenderPerSecond, Burst: ingest.DefaultPerSenderBurst},
			MaxSenders: ingest.DefaultMaxSenders}},
		{"everything set", `
im:
  webhook:
    bots: [{id: b1, secret: s1}]
    toleranceSeconds: 60
    maxBodyBytes: 1000
    maxInFlight: 3
    maxInFlightBytes: 5000
    rateLimit: {perBot: {perSecond: -1}, perSender: {perSecond: 2, burst: 4}, maxSenders: 7}
nats: {inboundDuplicatesMs: 180000}
`, ingest.WebhookOptions{Secrets: map[string]string{"b1": "s1"}, Tolerance: time.Minute, MaxBodyBytes: 1000, MaxInFlight: 3,
			MaxInFlightBytes: 5000, PerBot: ingest.RateLimit{PerSecond: -1, Burst: ingest.DefaultPerBotBurst},
			PerSender: ingest.RateLimit{PerSecond: 2, Burst: 4}, MaxSenders: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := webhookOptions(cfg.IM.Webhook); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("webhook options\n got %+v\nwant %+v", got, tt.want)
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
