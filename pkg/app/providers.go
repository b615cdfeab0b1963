package app

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/anthropic"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/llm/providers/google"
	"github.com/agentbus/agentbus/pkg/llm/providers/ollama"
	"github.com/agentbus/agentbus/pkg/llm/providers/openai"
	"github.com/agentbus/agentbus/pkg/llm/providers/openairesponses"
	"github.com/agentbus/agentbus/pkg/llmbus"
	"github.com/agentbus/agentbus/pkg/metrics"
)

// RegisterProviders registers every API implementation. The faux API takes its script or
// responder from the first faux provider's options block; without one it is the demo model.
func RegisterProviders(cfg *config.Config) error {
	openai.Register()
	openairesponses.Register()
	anthropic.Register()
	google.Register()
	ollama.Register()
	for _, p := range cfg.AI.Providers {
		if p.API == "faux" && len(p.Options) > 0 {
			fp, err := faux.NewFromOptions(p.Options)
			if err != nil {
				return fmt.Errorf("faux provider options: %w", err)
			}
			registerFaux(fp)
			return nil
		}
	}
	registerFaux(faux.New(faux.WithResponder(faux.Demo)))
	return nil
}

// DemoProvider is the alias of the built-in demo model.
const DemoProvider = "demo"

// ollamaHost is where a local Ollama listens by default.
const ollamaHost = "http://127.0.0.1:11434"

// ApplyDefaultModel fills ai.providers and ai.agents.zhin when the file configures no provider
// (DESIGN.md §6): a local Ollama that answers, else an API key from the environment, else the
// built-in demo model, which it reports so the banner can say so.
func ApplyDefaultModel(ctx context.Context, cfg *config.Config, probe bool, log *slog.Logger) (demo bool, err error) {
	if len(cfg.AI.Providers) > 0 {
		return false, nil
	}
	if cfg.AI.Agents == nil {
		cfg.AI.Agents = map[string]config.AgentBinding{}
	}
	use := func(alias string, p config.Provider, model string) {
		cfg.AI.Providers = map[string]config.Provider{alias: p}
		cfg.AI.Agents["zhin"] = config.AgentBinding{Provider: alias, Model: model}
		log.Info("no provider configured; using a default", "provider", alias, "api", p.API, "model", model)
	}
	if probe {
		if model, ok := probeOllama(ctx, ollamaHost); ok {
			use("ollama", config.Provider{API: "ollama-chat", Host: ollamaHost}, model)
			return false, nil
		}
		switch {
		case os.Getenv("OPENAI_API_KEY") != "":
			use("openai", config.Provider{API: "openai-completions"}, "gpt-4o-mini")
			return false, nil
		case os.Getenv("ANTHROPIC_API_KEY") != "":
			use("anthropic", config.Provider{API: "anthropic-messages"}, "claude-sonnet-4-5")
			return false, nil
		case os.Getenv("GEMINI_API_KEY") != "" || os.Getenv("GOOGLE_API_KEY") != "":
			use("google", config.Provider{API: "google-generative-ai"}, "gemini-2.5-flash")
			return false, nil
		}
	}
	use(DemoProvider, config.Provider{API: "faux", ContextWindow: 32768, Models: []config.ModelEntry{{ID: "demo", Name: "agentbus demo model"}}}, "demo")
	return true, nil
}

// probeOllama asks a local Ollama for its models; it answers within half a second or not at all.
func probeOllama(ctx context.Context, host string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/api/tags", nil)
	if err != nil {
		return "", false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&tags) != nil || len(tags.Models) == 0 {
		return "", false
	}
	return tags.Models[0].Name, true
}

func registerFaux(p *faux.Provider) { llm.RegisterAPI(llm.APIFaux, p) }

// newBusProviders returns an llmbus client per provider with api: bus, on the turn worker's
// connection, keyed by alias. They are the process's own, not in llm's process-wide
// registry: two processes in one program (tests, a cluster in one binary) each call their
// providers over their own connection.
func newBusProviders(cfg *config.Config, nc *nats.Conn) (map[string]*llmbus.Client, error) {
	out := map[string]*llmbus.Client{}
	for alias, p := range cfg.AI.Providers {
		if p.API != llmbus.API {
			continue
		}
		var opts []llmbus.ClientOption
		if p.IdleTimeoutMs > 0 {
			opts = append(opts, llmbus.WithIdleTimeout(time.Duration(p.IdleTimeoutMs)*time.Millisecond))
		}
		c, err := llmbus.NewClient(nc, p.Subject, opts...)
		if err != nil {
			return nil, fmt.Errorf("ai.providers.%s: %w", alias, err)
		}
		out[alias] = c
	}
	return out, nil
}

// busStream sends calls of models whose api is bus to their provider's llmbus client (with
// llm.Stream's guarantees, through llm.StreamProvider) and every other call to next.
func busStream(clients map[string]*llmbus.Client, next metrics.StreamFunc) metrics.StreamFunc {
	if len(clients) == 0 {
		return next
	}
	return func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
		if model.API != llmbus.API {
			return next(ctx, model, c, opts)
		}
		var p llm.Provider
		if cl, ok := clients[model.Provider]; ok {
			p = cl
		}
		return llm.StreamProvider(ctx, p, model, c, opts)
	}
}
