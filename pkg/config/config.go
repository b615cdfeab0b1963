// Package config loads agentbus's one YAML file.
//
// The ai: block is the seed's zhin.config.yml ai: block (providers with a required api, agents
// with provider/model/priority/match, agent, sessions, context, trigger). Further blocks: nats:,
// im:, roles:. Every scalar may use ${ENV} or ${ENV:-default}; expansion happens after parsing,
// so a secret containing YAML syntax cannot change the document's structure.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Config is the whole file.
type Config struct {
	DataDir string  `yaml:"dataDir"`
	NATS    NATS    `yaml:"nats"`
	IM      IM      `yaml:"im"`
	Roles   Roles   `yaml:"roles"`
	AI      AI      `yaml:"ai"`
	Log     Log     `yaml:"log"`
	Health  Health  `yaml:"health"`
	Metrics Metrics `yaml:"metrics"`
	Console Console `yaml:"console"`

	// Dispatcher is the seed guide's top-level dispatcher: block (MessageDispatcher); Parse
	// moves it into AI.Dispatcher, where the rest of agentbus reads it. Setting both is an error.
	Dispatcher *Dispatcher `yaml:"dispatcher"`

	// Path is the file Load read ("" for Parse). It holds secrets, so the tools never show it
	// (pkg/app marks it private to the file policy and the bash sandbox).
	Path string `yaml:"-"`

	// Reserved lists the keys the file set that agentbus accepts but does not implement yet
	// (see reservedKeys); callers log ReservedWarning(Reserved) once.
	Reserved []string `yaml:"-"`

	// MissingEnv lists ${VAR} references that were unset and had no default (they expanded to
	// ""). Callers warn about them; a missing API key is not an error until it is used.
	MissingEnv []string `yaml:"-"`

	// MissingKeyEnv maps a provider alias to the variable its apiKey refers to when that
	// variable is unset (and the reference has no default): the turn worker refuses to start
	// with such a provider rather than fail its first message (see MissingAPIKeyError).
	MissingKeyEnv map[string]string `yaml:"-"`
}

// Metrics configures the Prometheus endpoint every role process can serve.
type Metrics struct {
	// Listen, when set (e.g. "127.0.0.1:9090"), serves GET /metrics there. The same address as
	// health.listen (or im.webhook.listen) shares that listener. --metrics-listen overrides it.
	Listen string `yaml:"listen"`
}

// Health configures the /healthz endpoint every role process can serve.
type Health struct {
	// Listen, when set (e.g. "127.0.0.1:8081"), serves GET /healthz there: 200 while the bus
	// is connected, JetStream answers and the process's roles run, 503 naming what failed.
	// The ingest webhook server serves the same /healthz.
	Listen string `yaml:"listen"`
}

// Console configures the web console (pkg/webconsole): `agentbus console`, and `agentbus up`
// when Listen is set (up defaults it to DefaultConsoleListen; "off" turns it off).
type Console struct {
	// Listen is the console's HTTP address, e.g. "127.0.0.1:8089". Loopback is the safe
	// default; any other address is served with a warning (chat content is sensitive).
	Listen string `yaml:"listen"`
	// Token is the login token. Empty = a random token generated once into
	// <dataDir>/console.token (mode 0600) and reused.
	Token string `yaml:"token"`
}

// DefaultConsoleListen is where `agentbus up` serves the console unless console.listen says
// otherwise.
const DefaultConsoleListen = "127.0.0.1:8089"

// Log configures slog output.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// NATS says how to reach the bus.
type NATS struct {
	URL      string `yaml:"url"`      // nats://host:4222,nats://host2:4222
	Creds    string `yaml:"creds"`    // path to a .creds file
	NKeySeed string `yaml:"nkeySeed"` // path to an nkey seed file
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	Token    string `yaml:"token"`
	TLS      TLS    `yaml:"tls"`
	// Provision is what a process does with the streams and buckets at start: "update"
	// (default: create or update them) or "wait" (wait until they exist, change nothing: for
	// least-privileged role users that may not manage streams; an admin provisions).
	Provision string `yaml:"provision"`
	// Embedded runs a nats-server with JetStream inside the process (single machine, tests).
	Embedded bool `yaml:"embedded"`
	// StoreDir is the embedded server's JetStream directory (default <dataDir>/nats).
	StoreDir string `yaml:"storeDir"`
	// Listen, when set, lets other processes reach the embedded server (e.g. "127.0.0.1:4222").
	Listen string `yaml:"listen"`
	// Replicas for every stream and bucket: 1 embedded, 3 in a cluster.
	Replicas int `yaml:"replicas"`
	// Storage is "file" (default) or "memory".
	Storage string `yaml:"storage"`
	// Retention ages; zero picks the defaults documented in docs/configuration.md.
	IMInMaxAgeMs      int64 `yaml:"imInMaxAgeMs"`
	EventsMaxAgeMs    int64 `yaml:"eventsMaxAgeMs"`
	ToolResultsMaxAge int64 `yaml:"toolResultsMaxAgeMs"`
	// EpochsMaxAgeMs is how long the archive of ended session epochs (object store epochs,
	// what replay reads once SESSION_IN and AGENT_CTX are trimmed) keeps an epoch.
	EpochsMaxAgeMs int64 `yaml:"epochsMaxAgeMs"`
	// InboundDuplicatesMs is the dedupe window of IM_IN and SESSION_IN, which is also the
	// webhook's replay guard: it must be at least 2 × im.webhook.toleranceSeconds. Zero picks
	// 2 × the tolerance + 1 minute (11 minutes with the default tolerance).
	InboundDuplicatesMs int64 `yaml:"inboundDuplicatesMs"`
	// Region places this deployment in one region (one JetStream domain) of several; see
	// docs/regions.md. Unset: one region, nothing changes.
	Region Region `yaml:"region"`
}

// Region is the nats.region block: which region a process runs in, where its streams are
// placed, and whether the region is a standby holding mirrors of a live region's streams.
type Region struct {
	// Name of the region (free text for logs and `agentbus region status`).
	Name string `yaml:"name"`
	// Standby: the process provisions mirrors of the live region's streams (from the domain
	// Source) instead of live streams, never creates or updates a live stream, and waits until
	// `agentbus region promote` has turned the mirrors into live streams before its roles start.
	Standby bool `yaml:"standby"`
	// Source is the JetStream domain of the live region that a standby mirrors.
	Source string `yaml:"source"`
	// Cluster and Tags place every stream and bucket (stream placement): the cluster name and
	// server tags (server_tags in nats-server's config) a stream's replicas must run on.
	Cluster string   `yaml:"cluster"`
	Tags    []string `yaml:"tags"`
	// CheckpointMs is how often a live region records its durable consumers' ack floors in KV
	// region (mirrored with the rest), so that a promoted standby's consumers start after what
	// was already done (default 2000).
	CheckpointMs int64 `yaml:"checkpointMs"`
}

// Enabled reports whether a region is configured.
func (r Region) Enabled() bool { return r.Name != "" || r.Standby || r.Source != "" }

// TLS client settings.
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
}

// IM holds the platform adapters.
type IM struct {
	Webhook Webhook `yaml:"webhook"`
	// OneBot is the OneBot v11 adapter (QQ through NapCat, LLOneBot, Lagrange.OneBot, ...).
	// See docs/adapters/onebot.md.
	OneBot OneBot `yaml:"onebot"`
	// Telegram is the Telegram Bot API adapter. See docs/adapters/telegram.md.
	Telegram Telegram `yaml:"telegram"`
	// Discord is the Discord gateway adapter. See docs/adapters/discord.md.
	Discord Discord `yaml:"discord"`
	// Slack is the Slack adapter (Socket Mode or the Events API). See docs/adapters/slack.md.
	Slack Slack `yaml:"slack"`
	// Matrix is the Matrix client-server API adapter. See docs/adapters/matrix.md.
	Matrix Matrix `yaml:"matrix"`
	// Egress tunes outbound delivery (pkg/egress); zero values pick its defaults.
	Egress Egress `yaml:"egress"`
}

// Egress tunes outbound delivery. See docs/operations.md "Egress".
type Egress struct {
	// Concurrency is how many parts one egress process sends at the same time (default 16).
	Concurrency int `yaml:"concurrency"`
	// AckWaitMs is the IM_OUT consumer's ack wait (default 1000): how soon a crashed egress's
	// parts reach another replica. In-progress acks extend it from a part's fetch to its verdict.
	AckWaitMs int64 `yaml:"ackWaitMs"`
	// MaxRetries is how often a transient failure is retried within one delivery (default 3).
	MaxRetries int `yaml:"maxRetries"`
	// MaxDeliveries is how many deliveries a part gets before it is dead-lettered (default 8).
	MaxDeliveries int `yaml:"maxDeliveries"`
	// RateLimits per platform ("*" = every platform not listed); absent means unlimited.
	RateLimits map[string]EgressRateLimit `yaml:"rateLimits"`
}

// EgressRateLimit is a token bucket: perSecond sends on average, bursts of up to burst.
type EgressRateLimit struct {
	PerSecond float64 `yaml:"perSecond"`
	Burst     int     `yaml:"burst"`
}

// Webhook is the reference HTTP adapter.
type Webhook struct {
	Listen string       `yaml:"listen"` // default 127.0.0.1:8088
	Bots   []WebhookBot `yaml:"bots"`
	// ToleranceSeconds is how far a request's signed timestamp (webhook-timestamp, or the body's
	// time) may be from this clock, either way (default 300). Replays are refused while the
	// timestamp is valid by the dedupe window of IM_IN and SESSION_IN (nats.inboundDuplicatesMs,
	// at least twice this), and after it by the timestamp.
	ToleranceSeconds int `yaml:"toleranceSeconds"`
	// MaxBodyBytes caps one request body (default 8 MiB). MaxInFlightBytes caps the bytes of
	// the requests served at once, each counted as its body plus 16 KiB (default 64 MiB: about
	// 4,000 small messages, or eight 8 MiB ones); MaxInFlight caps their number (default 1024).
	// A request over either gets 503 + Retry-After; together they bound the memory a flood takes.
	MaxBodyBytes     int64 `yaml:"maxBodyBytes"`
	MaxInFlight      int   `yaml:"maxInFlight"`
	MaxInFlightBytes int64 `yaml:"maxInFlightBytes"`
	// RateLimit limits accepted requests per bot and per sender; over it: 429 + Retry-After.
	RateLimit WebhookRateLimits `yaml:"rateLimit"`
}

// ApplyDefaults fills every zero limit of w with its documented default.
func (w *Webhook) ApplyDefaults() {
	if w.ToleranceSeconds == 0 {
		w.ToleranceSeconds = 300
	}
	if w.MaxBodyBytes == 0 {
		w.MaxBodyBytes = 8 << 20 // room for a base64 photo, which ingest moves to the media store
	}
	if w.MaxInFlight == 0 {
		w.MaxInFlight = 1024 // a count bound only: memory is bounded by MaxInFlightBytes
	}
	if w.MaxInFlightBytes == 0 {
		w.MaxInFlightBytes = 64 << 20
	}
	if w.MaxInFlightBytes > 0 && w.MaxInFlightBytes < w.MaxBodyBytes {
		w.MaxInFlightBytes = w.MaxBodyBytes // one request of the largest size always fits
	}
	rateDefault := func(r *RateLimit, perSecond float64, burst int) {
		if r.PerSecond == 0 {
			r.PerSecond = perSecond
		}
		if r.Burst == 0 {
			r.Burst = burst
		}
	}
	rateDefault(&w.RateLimit.PerBot, 100, 200)
	rateDefault(&w.RateLimit.PerSender, 5, 20)
	if w.RateLimit.MaxSenders == 0 {
		w.RateLimit.MaxSenders = 10000
	}
}

// WebhookRateLimits are the webhook adapter's token buckets.
type WebhookRateLimits struct {
	PerBot    RateLimit `yaml:"perBot"`    // default 100/s, burst 200
	PerSender RateLimit `yaml:"perSender"` // default 5/s, burst 20
	// MaxSenders bounds how many per-sender buckets are kept (default 10000); idle ones are
	// evicted first, and when none is idle new senders get 429 until one is.
	MaxSenders int `yaml:"maxSenders"`
}

// RateLimit is a token bucket: PerSecond tokens a second, at most Burst at once. PerSecond < 0
// turns the limit off.
type RateLimit struct {
	PerSecond float64 `yaml:"perSecond"`
	Burst     int     `yaml:"burst"`
}

// WebhookBot is one bot reachable over the webhook adapter.
type WebhookBot struct {
	ID       string   `yaml:"id"`
	Secret   string   `yaml:"secret"`
	Callback string   `yaml:"callback"`
	Masters  []string `yaml:"masters"`
	Trusted  []string `yaml:"trusted"`
}

// OneBot configures the OneBot v11 adapter (pkg/im/onebot).
type OneBot struct {
	Bots []OneBotBot `yaml:"bots"`
}

// OneBotBot is one QQ account behind a OneBot v11 implementation.
type OneBotBot struct {
	// ID is the bot's id in session keys (onebot:<id>:<scope>:<scene>); usually its QQ number.
	ID string `yaml:"id"`
	// SelfID is the bot's own QQ number, used to recognise @-mentions of the bot (default: ID,
	// and the self_id of the first event once one arrives).
	SelfID string `yaml:"selfId"`
	// Mode is how agentbus and the implementation talk: "ws" (forward WebSocket: agentbus
	// dials apiBase; one ingest replica holds it), "ws-reverse" (the implementation dials
	// agentbus at /onebot/<id>/ws on the webhook listener) or "http" (API calls POSTed to
	// apiBase/<action>, events POSTed by the implementation to /onebot/<id> on the webhook
	// listener). Default "ws".
	Mode string `yaml:"mode"`
	// APIBase is the implementation's endpoint: ws://host:port for "ws", http://host:port
	// for "http". Media URLs on this host are fetched even when it is on loopback.
	APIBase string `yaml:"apiBase"`
	// AccessToken is OneBot's access_token (Authorization: Bearer), both directions.
	AccessToken string `yaml:"accessToken"`
	// Secret checks X-Signature (HMAC-SHA1) on event POSTs in "http" mode (optional).
	Secret  string   `yaml:"secret"`
	Masters []string `yaml:"masters"`
	Trusted []string `yaml:"trusted"`
	// ChunkLimit caps one message's length in characters (default 3000).
	ChunkLimit int `yaml:"chunkLimit"`
}

// Telegram configures the Telegram Bot API adapter (pkg/im/telegram).
type Telegram struct {
	Bots []TelegramBot `yaml:"bots"`
}

// TelegramBot is one Telegram bot.
type TelegramBot struct {
	// ID is the bot's id in session keys (telegram:<id>:<scope>:<chat id>).
	ID string `yaml:"id"`
	// Token is the bot token from @BotFather (use ${ENV}).
	Token string `yaml:"token"`
	// APIBase overrides the Bot API server (default https://api.telegram.org; a self-hosted
	// telegram-bot-api server or a test fake).
	APIBase string `yaml:"apiBase"`
	// Mode is "polling" (default: getUpdates long polling, held by one ingest replica) or
	// "webhook" (Telegram POSTs updates to /telegram/<id> on the webhook listener; any replica).
	Mode string `yaml:"mode"`
	// WebhookSecret is checked against X-Telegram-Bot-Api-Secret-Token in webhook mode.
	WebhookSecret string `yaml:"webhookSecret"`
	// WebhookURL, when set in webhook mode, is registered with setWebhook at start-up (the
	// public https URL that reaches /telegram/<id>).
	WebhookURL string   `yaml:"webhookUrl"`
	Masters    []string `yaml:"masters"`
	Trusted    []string `yaml:"trusted"`
	// Preview is the streaming preview mode: "off", "partial" (default: the reply grows in
	// one message edited as it streams) or "block" (edited once per finished paragraph).
	Preview string `yaml:"preview"`
	// PreviewIntervalMs is the least time between two edits of a preview (default 1000).
	PreviewIntervalMs int64 `yaml:"previewIntervalMs"`
	// ChunkLimit caps one message's length (default 4096, Telegram's limit).
	ChunkLimit int `yaml:"chunkLimit"`
}

// Discord configures the Discord adapter (pkg/im/discord).
type Discord struct {
	Bots []DiscordBot `yaml:"bots"`
}

// DiscordBot is one Discord bot application.
type DiscordBot struct {
	// ID is the bot's id in session keys (discord:<id>:<scope>:<channel id>).
	ID string `yaml:"id"`
	// Token is the bot token from the developer portal (use ${ENV}); sent as "Bot <token>".
	Token string `yaml:"token"`
	// APIBase overrides Discord's HTTP API root (default https://discord.com; requests go to
	// <apiBase>/api/v9/...). Attachment URLs on this host are fetched even on loopback.
	APIBase string `yaml:"apiBase"`
	// GatewayURL overrides the gateway WebSocket URL (default: the one GET /gateway returns).
	GatewayURL string   `yaml:"gatewayUrl"`
	Masters    []string `yaml:"masters"`
	Trusted    []string `yaml:"trusted"`
	// Preview is the streaming preview mode: "off", "partial" (default: the reply grows in
	// one message edited as it streams) or "block" (edited once per finished paragraph).
	Preview string `yaml:"preview"`
	// PreviewIntervalMs is the least time between two edits of a preview (default 1000).
	PreviewIntervalMs int64 `yaml:"previewIntervalMs"`
	// ChunkLimit caps one message's length (default 2000, Discord's limit).
	ChunkLimit int `yaml:"chunkLimit"`
}

// Slack configures the Slack adapter (pkg/im/slack).
type Slack struct {
	Bots []SlackBot `yaml:"bots"`
}

// SlackBot is one Slack app installed in a workspace.
type SlackBot struct {
	// ID is the bot's id in session keys (slack:<id>:<scope>:<channel id>).
	ID string `yaml:"id"`
	// BotToken is the bot user OAuth token, xoxb-... (use ${ENV}).
	BotToken string `yaml:"botToken"`
	// Mode is "socket" (default: Socket Mode over a WebSocket, held by one ingest replica; needs
	// AppToken) or "events" (the Events API: Slack POSTs to /slack/<id> on the webhook
	// listener; any replica; needs SigningSecret).
	Mode string `yaml:"mode"`
	// AppToken is the app-level token, xapp-..., with connections:write (Socket Mode).
	AppToken string `yaml:"appToken"`
	// SigningSecret verifies X-Slack-Signature on Events API requests.
	SigningSecret string `yaml:"signingSecret"`
	// APIBase overrides the Web API root (default https://slack.com/api). Files on its host are
	// fetched even on loopback.
	APIBase string   `yaml:"apiBase"`
	Masters []string `yaml:"masters"`
	Trusted []string `yaml:"trusted"`
	// Preview is the streaming preview mode: "off", "partial" (default: the reply grows in
	// one message updated with chat.update as it streams) or "block" (once per paragraph).
	Preview string `yaml:"preview"`
	// PreviewIntervalMs is the least time between two preview updates (default 1000).
	PreviewIntervalMs int64 `yaml:"previewIntervalMs"`
	// ChunkLimit caps one message's length (default 4000, what Slack advises per message).
	ChunkLimit int `yaml:"chunkLimit"`
}

// Matrix configures the Matrix adapter (pkg/im/matrix).
type Matrix struct {
	Bots []MatrixBot `yaml:"bots"`
}

// MatrixBot is one Matrix account the bot logs in as.
type MatrixBot struct {
	// ID is the bot's id in session keys (matrix:<id>:<scope>:<room id>).
	ID string `yaml:"id"`
	// Homeserver is the client-server API base URL (https://matrix.example.org). Media is
	// downloaded from it even when it is on loopback.
	Homeserver string `yaml:"homeserver"`
	// UserID is the bot's Matrix user id (@bot:example.org).
	UserID string `yaml:"userId"`
	// AccessToken is the bot's access token (use ${ENV}); it is never logged.
	AccessToken string   `yaml:"accessToken"`
	Masters     []string `yaml:"masters"`
	Trusted     []string `yaml:"trusted"`
	// AutoJoin joins rooms the bot is invited to (default true).
	AutoJoin *bool `yaml:"autoJoin"`
	// Preview is the streaming preview mode: "off", "partial" (default: the reply grows in
	// one message replaced with m.replace edits as it streams) or "block" (once per paragraph).
	Preview string `yaml:"preview"`
	// PreviewIntervalMs is the least time between two edits of a preview (default 1500).
	PreviewIntervalMs int64 `yaml:"previewIntervalMs"`
	// ChunkLimit caps one message's length in characters (default and maximum 8000, which
	// keeps an event with its HTML body under the 64 KiB event limit).
	ChunkLimit int `yaml:"chunkLimit"`
}

// Roles selects which roles a process runs (agentbus up runs all by default).
type Roles struct {
	Ingest     *bool `yaml:"ingest"`
	TurnWorker *bool `yaml:"turnWorker"`
	ToolWorker *bool `yaml:"toolWorker"`
	Egress     *bool `yaml:"egress"`
}

// AI is the seed's ai: block.
type AI struct {
	Providers       map[string]Provider       `yaml:"providers"`
	Agents          map[string]AgentBinding   `yaml:"agents"`
	Sessions        Sessions                  `yaml:"sessions"`
	Context         ContextCfg                `yaml:"context"`
	Agent           Agent                     `yaml:"agent"`
	Trigger         Trigger                   `yaml:"trigger"`
	Dispatcher      Dispatcher                `yaml:"dispatcher"`
	MCPServers      map[string]MCPServer      `yaml:"mcpServers"`
	MemoryMCP       *MCPServer                `yaml:"memoryMcp"` // served as mcpServers.memory (MemoryServerName)
	ImageGeneration ImageGeneration           `yaml:"imageGeneration"`
	Tools           Tools                     `yaml:"tools"`
	Scheduler       Scheduler                 `yaml:"scheduler"` // heartbeat and recurring jobs (scheduler.go)
	Hooks           []Hook                    `yaml:"hooks"`     // plugins called at steps of the pipeline (hooks.go)
	Extra           map[string]map[string]any `yaml:"extra"`
}

// Provider is one entry of ai.providers. API is required.
type Provider struct {
	API           string            `yaml:"api"`
	APIKey        string            `yaml:"apiKey"`
	BaseURL       string            `yaml:"baseUrl"`
	Host          string            `yaml:"host"` // ollama's base URL
	ContextWindow int               `yaml:"contextWindow"`
	MaxTokens     int               `yaml:"maxTokens"`
	NumCtx        int               `yaml:"num_ctx"`
	Headers       map[string]string `yaml:"headers"`
	// Models is the allowlist; when set, discovery is skipped. Entries are model ids or objects.
	Models          []ModelEntry      `yaml:"models"`
	Compat          map[string]any    `yaml:"compat"`
	Capabilities    Capabilities      `yaml:"capabilities"`
	Driver          string            `yaml:"driver"` // image generation driver only
	ImageGeneration ImageGenProvider  `yaml:"imageGeneration"`
	Thinking        string            `yaml:"thinking"` // default thinking level for this provider
	Options         map[string]any    `yaml:"options"`
	Extra           map[string]string `yaml:"extra"`
	// Subject is the NATS subject of a provider on the bus (api: bus, pkg/llmbus); required
	// there and only there. It must lie below LLMSubjectPrefix (the turn worker's permission).
	Subject string `yaml:"subject"`
	// IdleTimeoutMs (api: bus): how long the turn worker waits for any message of a reply
	// stream, heartbeats included, before it gives up (0 = 30000).
	IdleTimeoutMs int `yaml:"idleTimeoutMs"`
}

// LLMSubjectPrefix is where the subjects of providers on the bus live: the turn worker's NATS
// user may publish below it (pkg/natsutil BusRoles).
const LLMSubjectPrefix = "llm."

// builtinAPIs are the api values agentbus implements itself ("bus": pkg/llmbus).
var builtinAPIs = []string{"openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai", "ollama-chat", "faux", "bus"}

// knownAPI reports whether api is built in or registered with llm.RegisterAPI in this process
// (a program that embeds agentbus registers its own before it loads the configuration).
func knownAPI(api string) bool {
	if slices.Contains(builtinAPIs, api) {
		return true
	}
	_, err := llm.LookupAPI(api)
	return err == nil
}

// Capabilities overrides what discovery infers.
type Capabilities struct {
	Vision      *bool `yaml:"vision"`
	Streaming   *bool `yaml:"streaming"`
	ToolCalling *bool `yaml:"toolCalling"`
	Thinking    *bool `yaml:"thinking"`
}

// ModelEntry is one allowlisted model: either a bare id or an object with details.
type ModelEntry struct {
	ID            string   `yaml:"id"`
	Name          string   `yaml:"name"`
	Reasoning     bool     `yaml:"reasoning"`
	Input         []string `yaml:"input"`
	ContextWindow int      `yaml:"contextWindow"`
	MaxTokens     int      `yaml:"maxTokens"`
	Cost          struct {
		Input      float64 `yaml:"input"`
		Output     float64 `yaml:"output"`
		CacheRead  float64 `yaml:"cacheRead"`
		CacheWrite float64 `yaml:"cacheWrite"`
	} `yaml:"cost"`
}

// UnmarshalYAML accepts "gpt-4o" as well as {id: gpt-4o, ...}.
func (m *ModelEntry) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		m.ID = n.Value
		return nil
	}
	type plain ModelEntry
	return n.Decode((*plain)(m))
}

// ImageGenProvider is a provider's imageGeneration block.
type ImageGenProvider struct {
	DefaultModel     string `yaml:"defaultModel"`
	DefaultSize      string `yaml:"defaultSize"`
	Quality          string `yaml:"quality"`
	AspectRatio      string `yaml:"aspectRatio"`
	ImageSize        string `yaml:"imageSize"`
	PromptSuffix     string `yaml:"promptSuffix"`
	WatermarkEnabled *bool  `yaml:"watermarkEnabled"`
	AccountID        string `yaml:"accountId"` // cloudflare
}

// ImageGeneration is the global ai.imageGeneration block.
type ImageGeneration struct {
	WatermarkEnabled bool `yaml:"watermarkEnabled"`
}

// AgentBinding is one entry of ai.agents: which model serves which kind of turn.
type AgentBinding struct {
	Provider string     `yaml:"provider"`
	Model    string     `yaml:"model"`
	Priority int        `yaml:"priority"`
	Match    AgentMatch `yaml:"match"`
}

// AgentMatch routes turns to a binding.
type AgentMatch struct {
	HasMedia []string `yaml:"hasMedia"` // e.g. [image]
}

// Sessions is ai.sessions.
type Sessions struct {
	MaxHistory           int   `yaml:"maxHistory"`
	ExpireMs             int64 `yaml:"expireMs"`
	ColdStartMaxMessages int   `yaml:"coldStartMaxMessages"`
	ColdStartMaxAgeMs    int64 `yaml:"coldStartMaxAgeMs"`
	SessionIdleArchiveMs int64 `yaml:"sessionIdleArchiveMs"`
}

// ContextCfg is ai.context.
type ContextCfg struct {
	Enabled           *bool `yaml:"enabled"`
	MaxRecentMessages int   `yaml:"maxRecentMessages"`
	SummaryThreshold  int   `yaml:"summaryThreshold"`
	KeepAfterSummary  int   `yaml:"keepAfterSummary"`
	MaxContextTokens  int   `yaml:"maxContextTokens"`
}

// Agent is ai.agent: harness, security and iteration settings.
type Agent struct {
	MaxIterations            int                 `yaml:"maxIterations"`
	TimeoutMs                int64               `yaml:"timeout"`
	PreExecTimeoutMs         int64               `yaml:"preExecTimeout"`
	MaxSkills                int                 `yaml:"maxSkills"`
	MaxTools                 int                 `yaml:"maxTools"`
	ContextTokens            int                 `yaml:"contextTokens"`
	MaxHistoryShare          float64             `yaml:"maxHistoryShare"`
	ToneAwareness            *bool               `yaml:"toneAwareness"`
	ExecSecurity             string              `yaml:"execSecurity"`     // deny | allowlist | full
	ExecPreset               string              `yaml:"execPreset"`       // readonly | network | development | custom
	ExecAllowlist            []string            `yaml:"execAllowlist"`    // merged with the preset
	ExecApprovalMode         string              `yaml:"execApprovalMode"` // ask | allow | deny
	SensitiveSubcommands     map[string][]string `yaml:"sensitiveSubcommands"`
	ModelSizeHint            string              `yaml:"modelSizeHint"`
	SkillInstructionMaxChars int                 `yaml:"skillInstructionMaxChars"`
	MaxSubagentIterations    int                 `yaml:"maxSubagentIterations"`
	SubagentTurnWaitMs       int64               `yaml:"subagentTurnWaitMs"`
	SubagentTools            []string            `yaml:"subagentTools"`
	PhaseTrace               bool                `yaml:"phaseTrace"`
	RateLimit                AgentRateLimit      `yaml:"rateLimit"`
	ModelHarness             ModelHarness        `yaml:"modelHarness"`
	Compaction               Compaction          `yaml:"compaction"`
	Concurrency              string              `yaml:"concurrency"`     // parallel | queue | steer | interrupt | collect
	CollectWindowMs          int64               `yaml:"collectWindowMs"` // debounce for collect
	SteeringMode             string              `yaml:"steeringMode"`    // one-at-a-time | all
	FollowUpMode             string              `yaml:"followUpMode"`    // one-at-a-time | all
	ToolExecution            string              `yaml:"toolExecution"`   // parallel | sequential
	Thinking                 string              `yaml:"thinking"`
	Workspace                string              `yaml:"workspace"` // root for file tools and bash
	SkillsDir                string              `yaml:"skillsDir"`
	ToolsDir                 string              `yaml:"toolsDir"`
	AgentsDir                string              `yaml:"agentsDir"`
	BashTimeoutMs            int64               `yaml:"bashTimeoutMs"`
	BashOutputLimit          int                 `yaml:"bashOutputLimit"`
	ToolTimeoutMs            int64               `yaml:"toolTimeoutMs"`
	WebFetch                 WebFetch            `yaml:"webFetch"`
	WebSearch                WebSearch           `yaml:"webSearch"`
	// ToolSearch keeps only the orchestration tools in the main agent (tool_search,
	// run_deferred_task, spawn_task, ask_user); other tools run as deferred tasks.
	ToolSearch bool `yaml:"toolSearch"`
	// TaskTimeoutMs bounds one background task (deferred tool run, subagent); default 10 minutes.
	TaskTimeoutMs int64 `yaml:"taskTimeoutMs"`
	// Sandbox is how the bash tool's commands are isolated (docs/security.md "Bash sandbox").
	Sandbox Sandbox `yaml:"sandbox"`
}

// Sandbox is ai.agent.sandbox. Zero values pick pkg/sandbox's defaults.
type Sandbox struct {
	// AllowUnisolated lets bash run where bubblewrap cannot isolate commands (no bwrap, or a
	// seccomp profile that forbids namespaces). Without it such a tool worker refuses every bash
	// call. Logged loudly at start.
	AllowUnisolated bool `yaml:"allowUnisolated"`
	// Network: auto (default: outbound for execPreset network, none otherwise), none or outbound.
	Network string `yaml:"network"`
	// AllowNetworks are CIDR prefixes reachable in outbound mode although private or
	// link-local (e.g. an internal package mirror, "10.20.0.0/16").
	AllowNetworks []string `yaml:"allowNetworks"`
	// RunAs is "uid:gid", the user commands run as when the tool worker runs as root.
	RunAs  string        `yaml:"runAs"`
	Limits SandboxLimits `yaml:"limits"`
}

// SandboxLimits bound one bash command; 0 picks the default, -1 means no limit.
type SandboxLimits struct {
	Processes  int `yaml:"processes"`
	MemoryMiB  int `yaml:"memoryMiB"`
	CPUSeconds int `yaml:"cpuSeconds"`
	OpenFiles  int `yaml:"openFiles"`
	TmpMiB     int `yaml:"tmpMiB"`
	FileMiB    int `yaml:"fileMiB"`
}

// validate reports bad ai.agent.sandbox values through bad.
func (s Sandbox) validate(bad func(string, ...any)) {
	switch s.Network {
	case "", "auto", "none", "outbound":
	default:
		bad("ai.agent.sandbox.network %q: want one of auto, none, outbound", s.Network)
	}
	for _, n := range s.AllowNetworks {
		if _, err := netip.ParsePrefix(n); err != nil {
			bad("ai.agent.sandbox.allowNetworks: %q is not a CIDR prefix", n)
		}
	}
	if s.RunAs != "" {
		u, g, ok := strings.Cut(s.RunAs, ":")
		if _, err := strconv.ParseUint(u, 10, 32); !ok || err != nil {
			bad("ai.agent.sandbox.runAs %q: want numeric uid:gid", s.RunAs)
		} else if _, err := strconv.ParseUint(g, 10, 32); err != nil {
			bad("ai.agent.sandbox.runAs %q: want numeric uid:gid", s.RunAs)
		}
	}
	l := s.Limits
	for _, f := range []struct {
		k string
		v int
	}{{"processes", l.Processes}, {"memoryMiB", l.MemoryMiB}, {"cpuSeconds", l.CPUSeconds},
		{"openFiles", l.OpenFiles}, {"tmpMiB", l.TmpMiB}, {"fileMiB", l.FileMiB}} {
		if f.v < -1 {
			bad("ai.agent.sandbox.limits.%s %d: want -1 (no limit), 0 (default) or a positive number", f.k, f.v)
		}
	}
}

// WebFetch configures the web_fetch tool's SSRF guard.
type WebFetch struct {
	AllowPrivate bool     `yaml:"allowPrivate"`
	AllowHosts   []string `yaml:"allowHosts"`
	MaxBytes     int64    `yaml:"maxBytes"`
	TimeoutMs    int64    `yaml:"timeoutMs"`
}

// WebSearch configures the web_search backend; without a backend the tool is absent.
type WebSearch struct {
	Backend string `yaml:"backend"` // e.g. searxng
	URL     string `yaml:"url"`
	APIKey  string `yaml:"apiKey"`
}

// ModelHarness overrides harness settings per provider pattern or model.
type ModelHarness struct {
	ProviderPatterns map[string]Harness `yaml:"providerPatterns"`
	Models           map[string]Harness `yaml:"models"`
}

// Harness is the per-model loop tuning. Zero values mean "inherit".
type Harness struct {
	MaxIterations            int      `yaml:"maxIterations"`
	MaxTools                 int      `yaml:"maxTools"`
	MaxSkills                int      `yaml:"maxSkills"`
	ModelSizeHint            string   `yaml:"modelSizeHint"`
	SkillInstructionMaxChars int      `yaml:"skillInstructionMaxChars"`
	ToolExecution            string   `yaml:"toolExecution"`
	AlwaysTools              []string `yaml:"alwaysTools"`
	Thinking                 string   `yaml:"thinking"`
}

// Compaction is ai.agent.compaction.
type Compaction struct {
	Enabled          *bool `yaml:"enabled"`          // L1 + L2 (default true)
	Auto             *bool `yaml:"auto"`             // L2 on its own near the window (default true)
	KeepRecentTokens int   `yaml:"keepRecentTokens"` // newest tokens kept verbatim (default 20000, at most half the window)
	MinKeepCount     int   `yaml:"minKeepCount"`     // fewest messages kept verbatim (default 2)
	// ReserveTokens is the headroom for the reply: L2 runs above contextWindow - reserveTokens
	// (default 16384, at most a quarter of the window).
	ReserveTokens int `yaml:"reserveTokens"`
	// Model writes the summaries, as "provider/model" (default: the turn's model).
	Model string `yaml:"model"`
	// MemoryFlush runs the silent housekeeping turn that writes data/memory notes before an
	// automatic compaction (default true).
	MemoryFlush *bool `yaml:"memoryFlush"`
}

// Trigger is ai.trigger.
type Trigger struct {
	Enabled          *bool    `yaml:"enabled"`
	Prefixes         []string `yaml:"prefixes"`
	RespondToAt      *bool    `yaml:"respondToAt"`
	RespondToPrivate *bool    `yaml:"respondToPrivate"`
	IgnorePrefixes   []string `yaml:"ignorePrefixes"`
	TimeoutMs        int64    `yaml:"timeout"`
	Masters          []string `yaml:"masters"`
	Trusted          []string `yaml:"trusted"`
}

// Dispatcher is the command vs AI routing (ai.dispatcher, or top-level dispatcher in the seed).
type Dispatcher struct {
	Mode           string `yaml:"mode"`  // exclusive | dual
	Order          string `yaml:"order"` // command-first | ai-first
	AllowDualReply bool   `yaml:"allowDualReply"`
}

// MCPServer is one entry of ai.mcpServers.
type MCPServer struct {
	Transport string            `yaml:"transport"` // stdio | sse | streamable-http (default from command/url)
	Command   string            `yaml:"command"`
	Args      []string          `yaml:"args"`
	Env       map[string]string `yaml:"env"`
	URL       string            `yaml:"url"`
	Headers   map[string]string `yaml:"headers"`
	TimeoutMs int64             `yaml:"timeoutMs"`
	Disabled  bool              `yaml:"disabled"`
}

// Tools lists which built-in tools are enabled (empty = the defaults).
type Tools struct {
	Enabled  []string `yaml:"enabled"`
	Disabled []string `yaml:"disabled"`
}

// DefaultDataDir is dataDir when the file does not set it.
const DefaultDataDir = "./data"

// Bool returns *p, or def when p is nil.
func Bool(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// Load reads path, expands ${ENV}, applies defaults and validates.
func Load(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// Parse is Load without the file.
func Parse(raw []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	var missing []string
	keyEnv := apiKeyRefs(&root)
	expandNode(&root, &missing)
	c := &Config{MissingEnv: missing, MissingKeyEnv: keyEnv}
	if len(root.Content) > 0 {
		var unknown, reserved []string
		checkKeys(&root, reflect.TypeFor[Config](), "", &unknown, &reserved)
		if len(unknown) > 0 {
			return nil, fmt.Errorf("%w: %s", ErrUnknownKey, strings.Join(unknown, "; "))
		}
		for _, r := range reserved {
			c.Reserved = append(c.Reserved, display(r))
		}
		if err := root.Decode(c); err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		if c.Dispatcher != nil {
			if c.AI.Dispatcher != (Dispatcher{}) {
				return nil, fmt.Errorf("%w: dispatcher and ai.dispatcher are both set: keep one (they configure the same MessageDispatcher)", ErrInvalid)
			}
			c.AI.Dispatcher = *c.Dispatcher
			c.Dispatcher = nil
		}
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)

// apiKeyRefs finds, before expansion, each ai.providers.<alias>.apiKey that refers to an
// unset environment variable without a default, and returns alias -> variable.
func apiKeyRefs(root *yaml.Node) map[string]string {
	get := func(m *yaml.Node, key string) *yaml.Node {
		if m == nil || m.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i+1]
			}
		}
		return nil
	}
	if root == nil || len(root.Content) == 0 {
		return nil
	}
	providers := get(get(root.Content[0], "ai"), "providers")
	if providers == nil || providers.Kind != yaml.MappingNode {
		return nil
	}
	var out map[string]string
	for i := 0; i+1 < len(providers.Content); i += 2 {
		key := get(providers.Content[i+1], "apiKey")
		if key == nil || key.Kind != yaml.ScalarNode {
			continue
		}
		for _, m := range envRef.FindAllStringSubmatch(key.Value, -1) {
			if v, ok := os.LookupEnv(m[1]); (ok && v != "") || strings.Contains(m[0], ":-") {
				continue
			}
			if out == nil {
				out = map[string]string{}
			}
			out[providers.Content[i].Value] = m[1]
			break
		}
	}
	return out
}

// MissingAPIKeyError reports the first provider (by alias) among used whose apiKey refers to
// an unset environment variable, in one line naming the variable; nil when there is none.
func (c *Config) MissingAPIKeyError() error {
	var aliases []string
	for a := range c.MissingKeyEnv {
		if _, ok := c.AI.Providers[a]; ok {
			aliases = append(aliases, a)
		}
	}
	if len(aliases) == 0 {
		return nil
	}
	sort.Strings(aliases)
	a := aliases[0]
	return fmt.Errorf("%w: ai.providers.%s.apiKey refers to ${%s}, which is not set: export %s (or remove the provider)", ErrInvalid, a, c.MissingKeyEnv[a], c.MissingKeyEnv[a])
}

func expandNode(n *yaml.Node, missing *[]string) {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			m := envRef.FindStringSubmatch(ref)
			if v, ok := os.LookupEnv(m[1]); ok && v != "" {
				return v
			}
			if strings.Contains(ref, ":-") {
				return m[2]
			}
			*missing = append(*missing, m[1])
			return ""
		})
		// An unquoted ${PORT} resolves like the value it expands to (a number, a bool), so
		// numeric and boolean keys can come from the environment too; a quoted one stays a
		// string.
		switch n.Value {
		case "", "~", "null", "Null", "NULL": // a secret that reads "null" stays that string
		default:
			if n.Style == 0 {
				n.Tag = ""
			}
		}
	}
	for _, c := range n.Content {
		expandNode(c, missing)
	}
}

// ApplyDefaults fills what the file left out with the seed's documented defaults.
func (c *Config) ApplyDefaults() {
	c.AI.applyMemoryMCP()
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.NATS.URL == "" && !c.NATS.Embedded {
		c.NATS.Embedded = true
	}
	if c.NATS.Embedded && c.NATS.StoreDir == "" {
		c.NATS.StoreDir = c.DataDir + "/nats"
	}
	if c.NATS.Replicas == 0 {
		c.NATS.Replicas = 1
	}
	if c.NATS.Storage == "" {
		c.NATS.Storage = "file"
	}
	if c.NATS.InboundDuplicatesMs == 0 {
		tol := int64(c.IM.Webhook.ToleranceSeconds)
		if tol <= 0 {
			tol = 300
		}
		c.NATS.InboundDuplicatesMs = (2*tol + 60) * 1000
	}
	if c.IM.Webhook.Listen == "" {
		c.IM.Webhook.Listen = "127.0.0.1:8088"
	}
	for alias, p := range c.AI.Providers {
		if p.API == "" && p.Driver != "" {
			// An image-generation provider also serves the vendor's chat models, as in the seed
			// guide's example, where agents.draw runs its tool loop on the zhipu-vl provider.
			if ch, ok := driverChat[strings.ToLower(p.Driver)]; ok {
				p.API = ch.api
				if p.BaseURL == "" {
					p.BaseURL = ch.baseURL
				}
				c.AI.Providers[alias] = p
			}
		}
	}
	c.IM.Webhook.ApplyDefaults()
	s := &c.AI.Sessions
	if s.MaxHistory == 0 {
		s.MaxHistory = 200
	}
	if s.ExpireMs == 0 {
		s.ExpireMs = 7 * 24 * 3600 * 1000
	}
	if s.ColdStartMaxMessages == 0 {
		// As many as maxHistory: a load that reaches this bound is compacted (messages beyond it
		// would fall out unsummarized), and a bound of 50 summarized every chat of 25 short
		// exchanges (issue 37). The seed's example value 50 still applies when written.
		s.ColdStartMaxMessages = s.MaxHistory
	}
	if s.ColdStartMaxAgeMs == 0 {
		s.ColdStartMaxAgeMs = 24 * 3600 * 1000
	}
	if s.SessionIdleArchiveMs == 0 {
		s.SessionIdleArchiveMs = 7 * 24 * 3600 * 1000
	}
	cx := &c.AI.Context
	if cx.MaxRecentMessages == 0 {
		cx.MaxRecentMessages = 100
	}
	if cx.SummaryThreshold == 0 {
		cx.SummaryThreshold = 50
	}
	if cx.KeepAfterSummary == 0 {
		cx.KeepAfterSummary = 10
	}
	if cx.MaxContextTokens == 0 {
		cx.MaxContextTokens = 4000
	}
	a := &c.AI.Agent
	if a.MaxIterations == 0 {
		a.MaxIterations = 15
	}
	if a.TimeoutMs == 0 {
		a.TimeoutMs = 120000
	}
	if a.PreExecTimeoutMs == 0 {
		a.PreExecTimeoutMs = 15000
	}
	if a.MaxSkills == 0 {
		a.MaxSkills = 5
	}
	if a.MaxTools == 0 {
		a.MaxTools = 12
	}
	if a.ContextTokens == 0 {
		a.ContextTokens = 128000
	}
	if a.MaxHistoryShare == 0 {
		a.MaxHistoryShare = 0.5
	}
	if a.ExecSecurity == "" {
		a.ExecSecurity = "deny"
	}
	if a.ExecPreset == "" {
		a.ExecPreset = "custom"
	}
	if a.ExecApprovalMode == "" {
		a.ExecApprovalMode = "deny"
	}
	if a.MaxSubagentIterations == 0 {
		a.MaxSubagentIterations = 25
	}
	if a.Concurrency == "" {
		a.Concurrency = "parallel"
	}
	if a.CollectWindowMs == 0 {
		a.CollectWindowMs = 1500
	}
	if a.SteeringMode == "" {
		a.SteeringMode = "one-at-a-time"
	}
	if a.FollowUpMode == "" {
		a.FollowUpMode = "one-at-a-time"
	}
	if a.ToolExecution == "" {
		a.ToolExecution = "parallel"
	}
	if a.Workspace == "" {
		a.Workspace = c.DataDir + "/workspace"
	}
	if a.SkillsDir == "" {
		a.SkillsDir = "skills"
	}
	if a.ToolsDir == "" {
		a.ToolsDir = "tools"
	}
	if a.AgentsDir == "" {
		a.AgentsDir = "agents"
	}
	if a.BashTimeoutMs == 0 {
		a.BashTimeoutMs = 30000
	}
	if a.BashOutputLimit == 0 {
		a.BashOutputLimit = 64 * 1024
	}
	if a.ToolTimeoutMs == 0 {
		a.ToolTimeoutMs = 60000
	}
	if a.Compaction.KeepRecentTokens == 0 {
		a.Compaction.KeepRecentTokens = 20000
	}
	if a.Compaction.MinKeepCount == 0 {
		a.Compaction.MinKeepCount = 2
	}
	if a.Compaction.ReserveTokens == 0 {
		a.Compaction.ReserveTokens = 16384
	}
	t := &c.AI.Trigger
	if t.Prefixes == nil {
		t.Prefixes = []string{"ai:"}
	}
	if t.IgnorePrefixes == nil {
		t.IgnorePrefixes = []string{"/", "!", "！"}
	}
	if t.TimeoutMs == 0 {
		t.TimeoutMs = 60000
	}
	if c.AI.Dispatcher.Mode == "" {
		c.AI.Dispatcher.Mode = "exclusive"
	}
	if c.AI.Dispatcher.Order == "" {
		c.AI.Dispatcher.Order = "command-first"
	}
}

// driverChat is the chat api (and, where it is not that api's default, the endpoint) of each
// image-generation driver's vendor, for a provider that sets only driver:.
var driverChat = map[string]struct{ api, baseURL string }{
	"openai": {api: "openai-completions"},
	"zhipu":  {api: "openai-completions", baseURL: "https://open.bigmodel.cn/api/paas/v4"},
	"google": {api: "google-generative-ai"},
	"gemini": {api: "google-generative-ai"},
	// cloudflare: Workers AI image models only; a chat agent needs a provider with an api.
}

// ErrInvalid wraps every validation failure: fix the keys the message names.
var ErrInvalid = errors.New("invalid config")

// ErrUnknownKey: the file has a key agentbus does not know (a typo, or a key of another
// version); the message names each one with its line and, when close, the key meant.
var ErrUnknownKey = errors.New("unknown config key")

// Validate reports every problem at once, each naming its key.
// ReplayWindowProblem says what is wrong with the webhook's replay guard, or "": a signed
// request is valid for 2 × im.webhook.toleranceSeconds (its timestamp up to the tolerance
// either way), and a replay inside that time is refused only by the dedupe window of IM_IN and
// SESSION_IN (nats.inboundDuplicatesMs), which the server clamps to IM_IN's max age.
func ReplayWindowProblem(n NATS, wh Webhook) string {
	tol := int64(wh.ToleranceSeconds)
	if tol <= 0 {
		tol = 300
	}
	need := 2 * tol * 1000
	if n.InboundDuplicatesMs > 0 && n.InboundDuplicatesMs < need {
		return fmt.Sprintf("nats.inboundDuplicatesMs %d is shorter than 2 × im.webhook.toleranceSeconds (%d ms): a replayed webhook request would be accepted while its signature is still valid", n.InboundDuplicatesMs, need)
	}
	if n.IMInMaxAgeMs > 0 && n.IMInMaxAgeMs < need {
		return fmt.Sprintf("nats.imInMaxAgeMs %d is shorter than 2 × im.webhook.toleranceSeconds (%d ms): IM_IN's dedupe window, the webhook's replay guard, cannot outlast its max age", n.IMInMaxAgeMs, need)
	}
	return ""
}

func (c *Config) Validate() error {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	names := make([]string, 0, len(c.AI.Providers))
	for n := range c.AI.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := c.AI.Providers[n]
		apis := strings.Join(builtinAPIs, ", ")
		switch {
		case p.API == "":
			if p.Driver == "" {
				bad("ai.providers.%s.api is required (one of %s)", n, apis)
			}
		case !knownAPI(p.API):
			bad("ai.providers.%s.api %q is not known (one of %s, or a name the program registers with llm.RegisterAPI before it loads the configuration)", n, p.API, apis)
		}
		switch {
		case p.API == "bus" && p.Subject == "":
			bad("ai.providers.%s.subject is required with api: bus (the NATS subject the provider service listens on, below %q)", n, LLMSubjectPrefix)
		case p.API == "bus" && (!strings.HasPrefix(p.Subject, LLMSubjectPrefix) || len(p.Subject) == len(LLMSubjectPrefix) || strings.ContainsAny(p.Subject, " \t*>") || strings.Contains(p.Subject, "..") || strings.HasSuffix(p.Subject, ".")):
			bad("ai.providers.%s.subject %q: want a literal NATS subject below %q (e.g. llm.%s; the turn worker may publish only there)", n, p.Subject, LLMSubjectPrefix, n)
		case p.API != "bus" && p.Subject != "":
			bad("ai.providers.%s.subject is only for api: bus (this provider's api is %q)", n, p.API)
		}
		if p.IdleTimeoutMs < 0 || p.IdleTimeoutMs > 0 && p.API != "bus" {
			bad("ai.providers.%s.idleTimeoutMs %d: a positive number of milliseconds, only for api: bus", n, p.IdleTimeoutMs)
		}
	}
	for n, a := range c.AI.Agents {
		if a.Provider != "" {
			if _, ok := c.AI.Providers[a.Provider]; !ok {
				bad("ai.agents.%s.provider %q is not in ai.providers", n, a.Provider)
			}
		}
	}
	oneOf := func(key, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad("%s %q: want one of %s", key, v, strings.Join(allowed, ", "))
	}
	a := c.AI.Agent
	oneOf("ai.agent.execSecurity", a.ExecSecurity, "deny", "allowlist", "full")
	oneOf("ai.agent.execPreset", a.ExecPreset, "readonly", "network", "development", "custom")
	oneOf("ai.agent.execApprovalMode", a.ExecApprovalMode, "ask", "allow", "deny")
	oneOf("ai.agent.concurrency", a.Concurrency, "parallel", "queue", "steer", "interrupt", "collect")
	oneOf("ai.agent.steeringMode", a.SteeringMode, "one-at-a-time", "all")
	oneOf("ai.agent.followUpMode", a.FollowUpMode, "one-at-a-time", "all")
	oneOf("ai.agent.toolExecution", a.ToolExecution, "parallel", "sequential")
	a.Sandbox.validate(bad)
	a.RateLimit.validate(bad)
	if a.SubagentTurnWaitMs != 0 {
		bad("%s", subagentWaitProblem(a.SubagentTurnWaitMs))
	}
	a.ModelHarness.validate(bad)
	oneOf("ai.dispatcher.mode", c.AI.Dispatcher.Mode, "exclusive", "dual")
	oneOf("ai.dispatcher.order", c.AI.Dispatcher.Order, "command-first", "ai-first")
	oneOf("nats.storage", c.NATS.Storage, "file", "memory")
	c.AI.Scheduler.validate(bad)
	validateHooks(c.AI.Hooks, bad)
	if c.NATS.Provision != "" {
		oneOf("nats.provision", c.NATS.Provision, "update", "wait")
	}
	if c.NATS.Region.Enabled() && c.NATS.Embedded {
		bad("nats.region needs nats.url: a region is a NATS cluster in a JetStream domain of its own, not the embedded server")
	}
	if r := c.NATS.Region; r.Standby && r.Source == "" {
		bad("nats.region.standby needs nats.region.source: the JetStream domain of the live region to mirror")
	}
	if c.NATS.Region.CheckpointMs < 0 {
		bad("nats.region.checkpointMs %d: must not be negative", c.NATS.Region.CheckpointMs)
	}
	if wh := c.IM.Webhook; wh.ToleranceSeconds < 0 || wh.ToleranceSeconds > 3600 {
		bad("im.webhook.toleranceSeconds %d: want 1..3600", wh.ToleranceSeconds)
	}
	if msg := ReplayWindowProblem(c.NATS, c.IM.Webhook); msg != "" && len(c.IM.Webhook.Bots) > 0 {
		bad("%s", msg)
	}
	if c.IM.Webhook.MaxBodyBytes < 0 || c.IM.Webhook.MaxInFlight < 0 || c.IM.Webhook.MaxInFlightBytes < 0 || c.IM.Webhook.RateLimit.MaxSenders < 0 {
		bad("im.webhook.maxBodyBytes, maxInFlight, maxInFlightBytes and rateLimit.maxSenders must not be negative")
	}
	for i, b := range c.IM.Webhook.Bots {
		if b.ID == "" {
			bad("im.webhook.bots[%d].id is required", i)
		}
		if b.Secret == "" {
			bad("im.webhook.bots[%d].secret is required (requests are signed with it)", i)
		}
	}
	seen := map[string]bool{}
	for i, b := range c.IM.OneBot.Bots {
		key := fmt.Sprintf("im.onebot.bots[%d]", i)
		switch {
		case b.ID == "":
			bad("%s.id is required", key)
		case seen["onebot/"+b.ID]:
			bad("%s.id %q is used twice", key, b.ID)
		}
		seen["onebot/"+b.ID] = true
		oneOf(key+".mode", b.Mode, "", "ws", "ws-reverse", "http")
		mode := b.Mode
		if mode == "" {
			mode = "ws"
		}
		if (mode == "ws" || mode == "http") && b.APIBase == "" {
			bad("%s.apiBase is required in mode %s (ws://host:port or http://host:port of the implementation)", key, mode)
		}
		// Events arrive on agentbus's own listener in these modes: without a credential anyone
		// who reaches it (a sandboxed command on the same host, too) could speak as any QQ user,
		// masters included. The listener is TCP only, so there is no Unix-socket exception.
		switch {
		case mode == "ws-reverse" && b.AccessToken == "":
			bad("%s.accessToken is required in mode ws-reverse: the implementation connects to agentbus's listener with it (Authorization: Bearer)", key)
		case mode == "http" && b.AccessToken == "" && b.Secret == "":
			bad("%s.secret (X-Signature) or accessToken is required in mode http: events are POSTed to agentbus's listener, which refuses unauthenticated listeners", key)
		}
	}
	for i, b := range c.IM.Telegram.Bots {
		key := fmt.Sprintf("im.telegram.bots[%d]", i)
		switch {
		case b.ID == "":
			bad("%s.id is required", key)
		case seen["telegram/"+b.ID]:
			bad("%s.id %q is used twice", key, b.ID)
		}
		seen["telegram/"+b.ID] = true
		if b.Token == "" {
			bad("%s.token is required (from @BotFather; use ${ENV})", key)
		}
		oneOf(key+".mode", b.Mode, "", "polling", "webhook")
		if b.Mode == "webhook" && b.WebhookSecret == "" {
			bad("%s.webhookSecret is required in mode webhook (Telegram sends it as X-Telegram-Bot-Api-Secret-Token; agentbus refuses unauthenticated listeners)", key)
		}
		oneOf(key+".preview", b.Preview, "", "off", "partial", "block")
	}
	for i, b := range c.IM.Discord.Bots {
		key := fmt.Sprintf("im.discord.bots[%d]", i)
		switch {
		case b.ID == "":
			bad("%s.id is required", key)
		case seen["discord/"+b.ID]:
			bad("%s.id %q is used twice", key, b.ID)
		}
		seen["discord/"+b.ID] = true
		if b.Token == "" {
			bad("%s.token is required (the bot token from the developer portal; use ${ENV})", key)
		}
		oneOf(key+".preview", b.Preview, "", "off", "partial", "block")
	}
	for i, b := range c.IM.Slack.Bots {
		key := fmt.Sprintf("im.slack.bots[%d]", i)
		switch {
		case b.ID == "":
			bad("%s.id is required", key)
		case seen["slack/"+b.ID]:
			bad("%s.id %q is used twice", key, b.ID)
		}
		seen["slack/"+b.ID] = true
		if b.BotToken == "" {
			bad("%s.botToken is required (xoxb-...; use ${ENV})", key)
		}
		oneOf(key+".mode", b.Mode, "", "socket", "events")
		switch {
		case (b.Mode == "" || b.Mode == "socket") && b.AppToken == "":
			bad("%s.appToken is required in Socket Mode (xapp-... with connections:write)", key)
		case b.Mode == "events" && b.SigningSecret == "":
			bad("%s.signingSecret is required with the Events API", key)
		}
		oneOf(key+".preview", b.Preview, "", "off", "partial", "block")
	}
	for i, b := range c.IM.Matrix.Bots {
		key := fmt.Sprintf("im.matrix.bots[%d]", i)
		switch {
		case b.ID == "":
			bad("%s.id is required", key)
		case seen["matrix/"+b.ID]:
			bad("%s.id %q is used twice", key, b.ID)
		}
		seen["matrix/"+b.ID] = true
		if b.Homeserver == "" {
			bad("%s.homeserver is required (https://matrix.example.org)", key)
		}
		if !strings.HasPrefix(b.UserID, "@") || !strings.Contains(b.UserID, ":") {
			bad("%s.userId %q: want @localpart:server", key, b.UserID)
		}
		if b.AccessToken == "" {
			bad("%s.accessToken is required (use ${ENV})", key)
		}
		oneOf(key+".preview", b.Preview, "", "off", "partial", "block")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(errs, "; "))
	}
	return nil
}
