package turn

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/memory"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/tasks"
)

// Defaults of Options. They are the defaults docs/configuration.md gives for the ai: keys
// named beside each (pkg/app maps those keys onto Options).
const (
	DefaultLeaseTTL               = 2 * time.Second
	DefaultAckWait                = 2 * time.Second
	DefaultIdleRelease            = time.Minute
	DefaultToolTimeout            = time.Minute             // ai.agent.toolTimeoutMs
	DefaultTurnTimeout            = 2 * time.Minute         // ai.agent.timeout
	DefaultPreExecTimeout         = 15 * time.Second        // ai.agent.preExecTimeout
	DefaultCollectWindow          = 1500 * time.Millisecond // ai.agent.collectWindowMs
	DefaultConcurrency            = "parallel"              // ai.agent.concurrency
	DefaultQueueMode              = "one-at-a-time"         // ai.agent.steeringMode, followUpMode
	DefaultContextTokens          = 128000                  // ai.agent.contextTokens
	DefaultMaxHistoryShare        = 0.5                     // ai.agent.maxHistoryShare
	DefaultKeepRecentTokens       = 20000                   // ai.agent.compaction.keepRecentTokens
	DefaultMinKeepCount           = 2                       // ai.agent.compaction.minKeepCount
	DefaultReserveTokens          = 16384                   // ai.agent.compaction.reserveTokens
	DefaultMaxHistory             = 200                     // ai.sessions.maxHistory
	DefaultColdStartMaxAge        = 24 * time.Hour          // ai.sessions.coldStartMaxAgeMs
	DefaultSessionIdleArchive     = 7 * 24 * time.Hour      // ai.sessions.sessionIdleArchiveMs
	DefaultSessionExpire          = 7 * 24 * time.Hour      // ai.sessions.expireMs
	DefaultMaxRecentMessages      = 100                     // ai.context.maxRecentMessages
	DefaultSummaryThreshold       = 50                      // ai.context.summaryThreshold
	DefaultKeepAfterSummary       = 10                      // ai.context.keepAfterSummary
	DefaultLegacyMaxContextTokens = 4000                    // ai.context.maxContextTokens
)

// Options configure a Worker. Models and Route are required; every other zero value picks
// the default its comment names. New fills the defaults (setDefaults) and checks the result once (Validate), wrapping
// ErrConfig. The turn worker reads no configuration file: pkg/app maps the ai: block onto these
// fields (milliseconds become time.Duration there, once).
type Options struct {
	// ID names this replica in leases and logs (default: a random id).
	ID string
	// NC and JS are the bus connection and its JetStream context, for Run (New takes them as
	// arguments instead). JS defaults to jetstream.New(NC).
	NC *nats.Conn
	JS jetstream.JetStream

	// Models resolves providers and models (ai.providers). Required.
	Models *llm.Registry
	// Route picks the model of a turn whose input carries the media kinds hasMedia (["image"]
	// or nil): the ai.agents routing, which pkg/app delegates to models.Route. Required.
	Route func(hasMedia []string) (*llm.Model, error)
	// Agents are the ai.agents bindings by name: /model accepts their names, /agents lists
	// them (with what Route and Models resolve them to). Routing itself is Route's.
	Agents map[string]Binding
	// Harness is a model's loop tuning (ai.agent, the built-in size defaults and
	// ai.agent.modelHarness, which pkg/app resolves with models.ResolveHarness); nil: the zero
	// Harness for every model (the loop's own iteration default, every permitted tool).
	Harness func(provider, modelID string) Harness
	// ModelsReport answers /models (default: the registry's providers and models, one line each).
	ModelsReport func() string

	// LeaseTTL is the TTL of the replica's liveness lease (default 2s; whole seconds, at least
	// 1s), renewed every LeaseTTL/3. A killed worker's sessions are taken over once its
	// doorbell has had no responders for 400 ms (peers.go); the TTL is the fallback for a
	// process that stalls with its connection open.
	LeaseTTL time.Duration
	// AckWait of the shared consumer (default 2s); held deliveries get in-progress acks every
	// AckWait/3, so a crashed worker's deliveries come back after at most AckWait.
	AckWait time.Duration
	// IdleRelease is how long an actor with nothing to do keeps its session (default 60s).
	// Longer keeps more sessions warm on this replica; an idle actor costs memory (its
	// session's context stays cached), no bus traffic: its claim is never renewed. A message
	// that finds no actor pays a cold start on its reply path (the claim, the session record,
	// the inbox's last event, the last commit, the context), so the default outlasts the pause
	// between two messages of a conversation: people answer within seconds to a minute, and
	// at 2,000 sessions and 200 turns/s each session talks every 10 s, which a release after
	// 10 s turned into a cold start for nearly every message.
	IdleRelease time.Duration

	// ToolTimeout bounds one tool call whose catalogue entry names no timeout
	// (ai.agent.toolTimeoutMs, default 1 min).
	ToolTimeout time.Duration
	// TurnTimeout bounds the model steps and tool calls of one turn (ai.agent.timeout, default
	// 2 min; negative: no bound); the commit and the reply that follow are not bounded by it.
	// /compact and /tree summaries get as long.
	TurnTimeout time.Duration
	// PreExecTimeout bounds the pre-executed tools of a turn together (ai.agent.preExecTimeout,
	// default 15 s).
	PreExecTimeout time.Duration
	// Concurrency is the policy for a message that arrives while a turn runs, unless the chat
	// chose another with /queue: parallel, queue, steer, interrupt or collect
	// (ai.agent.concurrency, default parallel).
	Concurrency string
	// CollectWindow is how long the collect policy waits for more messages after the last one
	// (ai.agent.collectWindowMs, default 1.5 s).
	CollectWindow time.Duration
	// SteeringMode and FollowUpMode say how many queued steering and follow-up messages the
	// loop takes at once: "one-at-a-time" (default) or "all" (ai.agent.steeringMode,
	// followUpMode).
	SteeringMode string
	FollowUpMode string
	// Workspace is the root of the file tools and bash (ai.agent.workspace); its path is
	// removed from tool errors before the model reads them. Empty: nothing is removed.
	Workspace string
	// PhaseTrace logs the phases of every turn (ai.agent.phaseTrace; ZHIN_AGENT_PHASE_TRACE=1
	// turns it on too).
	PhaseTrace bool
	// NoToneHints leaves out the system prompt section on the tone of the user's message
	// (ai.agent.toneAwareness: false; default: the section is added when the tone is clear).
	NoToneHints bool
	// RateLimit bounds the model calls each user causes (ai.agent.rateLimit; zero: no limit).
	RateLimit RateLimit

	// ContextTokens is the context window of a model whose window is unknown
	// (ai.agent.contextTokens, default 128000).
	ContextTokens int
	// MaxHistoryShare is the share of the window the history (summary and messages) may take
	// before it is compacted (ai.agent.maxHistoryShare, default 0.5; 1 or more: no such bound).
	MaxHistoryShare float64
	// Compaction tunes the context compaction (ai.agent.compaction).
	Compaction Compaction
	// History bounds what a turn loads of its session (ai.sessions, ai.context).
	History History

	// MCPServers names the configured MCP servers that are not disabled (ai.mcpServers), which
	// /mcp lists besides the servers the tool workers serve tools for.
	MCPServers []string
	// Endpoints are the configured IM endpoints that hold no connection ("webhook/<bot>"),
	// which /endpoints lists besides the adapters in KV presence.
	Endpoints []string
	// ToolSearch keeps only the orchestration tools in the main agent (tool_search,
	// run_deferred_task, spawn_task): every other tool runs as a deferred task
	// (ai.agent.toolSearch).
	ToolSearch bool
	// Tasks tune the background-task runner (subagents, deferred tool calls, ai.scheduler);
	// pkg/tasks applies the defaults and validates them in New.
	Tasks tasks.Options

	// StreamFn replaces llm.Stream (tests, benchmarks).
	StreamFn loop.StreamFunc
	// Tracer records a span per turn and per tool call (nil: off). Model-call spans come from
	// the StreamFn, wrapped with tracing.WrapStream by the composition root.
	Tracer trace.TracerProvider
	// Secrets are removed from model errors before they are stored or shown
	// (llm.StreamOptions.Secrets): every configured provider key, token and password.
	Secrets []string
	// Prompt adds sections to the system prompt (bootstrap files, profiles); may be nil.
	Prompt PromptSource
	// Health adds lines to /health; may be nil.
	Health HealthSource
	// Skills drives the seed's two-level tool selection (skills by keywords, then tools
	// ranked, bounded by the Harness's MaxSkills and MaxTools); nil offers every permitted tool.
	Skills *skills.Store
	// FetchImage inlines an image a message references by URL, for vision models; nil sends
	// the reference as text.
	FetchImage func(ctx context.Context, url string) (data []byte, mimeType string, err error)
	// Memory holds the memory files the housekeeping turn before a compaction may write; nil
	// skips that turn.
	Memory *memory.Store
	// Metrics counts turns, sessions owned and lease takeovers; DeadLetters the dead letters
	// this worker publishes. nil: not counted.
	Metrics     *metrics.Turn
	DeadLetters *metrics.DeadLetters
	// Log is the logger (default slog.Default()).
	Log *slog.Logger
	// Hooks runs the turn worker's ai.hooks events (nil: none; hooks.go).
	Hooks *hooks.Runner
}

// Binding is one ai.agents entry: a provider and, optionally, a model of it.
type Binding struct {
	Provider string // empty: the best model over every provider
	Model    string // empty: the provider's best model
	Priority int
	HasMedia []string // the media kinds of the turns it serves (empty: any turn)
}

// Harness is one model's loop tuning. Zero values leave the choice to the loop (iterations)
// or offer every permitted tool (MaxTools, MaxSkills).
type Harness struct {
	MaxIterations int
	MaxTools      int
	MaxSkills     int
	// AlwaysTools are offered whatever the message says (still only those the sender may use).
	AlwaysTools []string
	// ToolExecution is "parallel" or "sequential" (empty: the loop's default, parallel).
	ToolExecution string
	// Thinking is the reasoning level (llm.ParseThinkingLevel; empty: the provider's default).
	Thinking string
	// ModelSize ("small", "medium", "large") and SkillInstructionMaxChars travel with each tool
	// call, for tools that size their output.
	ModelSize                string
	SkillInstructionMaxChars int
}

// RateLimit bounds the model calls each user causes, per fixed minute, hour and day window
// (zero: no bound for that window). Masters are not limited unless IncludeMasters is set.
type RateLimit struct {
	PerMinute, PerHour, PerDay int
	IncludeMasters             bool
}

func (r RateLimit) enabled() bool { return r.PerMinute > 0 || r.PerHour > 0 || r.PerDay > 0 }

// Compaction tunes the context compaction (docs/compaction.md).
type Compaction struct {
	// Disabled turns compaction off altogether (L1 and L2); NoAuto keeps it to /compact.
	Disabled, NoAuto bool
	// KeepRecentTokens are the newest tokens kept verbatim (default 20000, at most half the
	// window); MinKeepCount the fewest messages kept (default 2).
	KeepRecentTokens, MinKeepCount int
	// ReserveTokens is the headroom for the reply: the automatic compaction runs above the
	// window less this (default 16384, at most a quarter of the window).
	ReserveTokens int
	// Model writes the summaries, as "provider/model" (default: the turn's model).
	Model string
	// NoMemoryFlush skips the housekeeping turn that writes memory notes before an automatic
	// compaction.
	NoMemoryFlush bool
}

// History bounds what a turn loads and keeps of its session.
type History struct {
	// MaxHistory is the most messages after the summary (ai.sessions.maxHistory, default 200;
	// negative: no bound); more are compacted.
	MaxHistory int
	// ColdStartMaxMessages and ColdStartMaxAge bound a load of the context log
	// (ai.sessions.coldStartMaxMessages, default MaxHistory; coldStartMaxAgeMs, default 24 h).
	ColdStartMaxMessages int
	ColdStartMaxAge      time.Duration
	// IdleArchive and Expire: a conversation event after the session was quiet for the
	// smaller of the two starts a new epoch (ai.sessions.sessionIdleArchiveMs and expireMs,
	// default 7 days each; negative: never).
	IdleArchive, Expire time.Duration
	// Legacy is the seed's ai.context block.
	Legacy LegacyContext
}

// LegacyContext is the seed's count-based compaction (ai.context). Only MaxRecentMessages
// applies unless Enabled is set.
type LegacyContext struct {
	Enabled bool
	// MaxRecentMessages bounds the messages a turn loads, with MaxHistory (default 100).
	MaxRecentMessages int
	// With Enabled: compact above SummaryThreshold messages (default 50), keeping
	// KeepAfterSummary (default 10), or above MaxContextTokens of history (default 4000).
	SummaryThreshold, KeepAfterSummary, MaxContextTokens int
}

// setDefaults fills every zero field that has a default.
func (o *Options) setDefaults() {
	if o.ID == "" {
		o.ID = "tw-" + events.NewID()[:8]
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	num := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	str := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	dur(&o.LeaseTTL, DefaultLeaseTTL)
	dur(&o.AckWait, DefaultAckWait)
	dur(&o.IdleRelease, DefaultIdleRelease)
	dur(&o.ToolTimeout, DefaultToolTimeout)
	dur(&o.TurnTimeout, DefaultTurnTimeout)
	dur(&o.PreExecTimeout, DefaultPreExecTimeout)
	dur(&o.CollectWindow, DefaultCollectWindow)
	str(&o.Concurrency, DefaultConcurrency)
	str(&o.SteeringMode, DefaultQueueMode)
	str(&o.FollowUpMode, DefaultQueueMode)
	num(&o.ContextTokens, DefaultContextTokens)
	if o.MaxHistoryShare == 0 {
		o.MaxHistoryShare = DefaultMaxHistoryShare
	}
	c := &o.Compaction
	num(&c.KeepRecentTokens, DefaultKeepRecentTokens)
	num(&c.MinKeepCount, DefaultMinKeepCount)
	num(&c.ReserveTokens, DefaultReserveTokens)
	h := &o.History
	num(&h.MaxHistory, DefaultMaxHistory)
	num(&h.ColdStartMaxMessages, h.MaxHistory)
	dur(&h.ColdStartMaxAge, DefaultColdStartMaxAge)
	dur(&h.IdleArchive, DefaultSessionIdleArchive)
	dur(&h.Expire, DefaultSessionExpire)
	l := &h.Legacy
	num(&l.MaxRecentMessages, DefaultMaxRecentMessages)
	num(&l.SummaryThreshold, DefaultSummaryThreshold)
	num(&l.KeepAfterSummary, DefaultKeepAfterSummary)
	num(&l.MaxContextTokens, DefaultLegacyMaxContextTokens)
}

// Validate reports the first unusable field of o (after setDefaults), wrapping ErrConfig.
func (o Options) Validate() error {
	queueModes := []string{"one-at-a-time", "all"}
	switch {
	case o.Models == nil:
		return fmt.Errorf("%w: Models is required", ErrConfig)
	case o.Route == nil:
		return fmt.Errorf("%w: Route is required", ErrConfig)
	case o.LeaseTTL < time.Second:
		return fmt.Errorf("%w: LeaseTTL %v is under 1s", ErrConfig, o.LeaseTTL)
	case o.AckWait <= 0 || o.IdleRelease <= 0 || o.ToolTimeout <= 0 || o.PreExecTimeout <= 0 || o.CollectWindow < 0:
		return fmt.Errorf("%w: AckWait, IdleRelease, ToolTimeout and PreExecTimeout must be positive, CollectWindow not negative", ErrConfig)
	case !slices.Contains(policies, o.Concurrency):
		return fmt.Errorf("%w: Concurrency %q is none of %v", ErrConfig, o.Concurrency, policies)
	case !slices.Contains(queueModes, o.SteeringMode):
		return fmt.Errorf("%w: SteeringMode %q is none of %v", ErrConfig, o.SteeringMode, queueModes)
	case !slices.Contains(queueModes, o.FollowUpMode):
		return fmt.Errorf("%w: FollowUpMode %q is none of %v", ErrConfig, o.FollowUpMode, queueModes)
	case o.RateLimit.PerMinute < 0 || o.RateLimit.PerHour < 0 || o.RateLimit.PerDay < 0:
		return fmt.Errorf("%w: RateLimit counts must not be negative", ErrConfig)
	case o.Compaction.KeepRecentTokens < 0 || o.Compaction.MinKeepCount < 0 || o.Compaction.ReserveTokens < 0 || o.ContextTokens < 0:
		return fmt.Errorf("%w: Compaction token counts and ContextTokens must not be negative", ErrConfig)
	}
	return nil
}
