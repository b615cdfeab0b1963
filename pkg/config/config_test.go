package config

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
)

func TestParseEnvAndDefaults(t *testing.T) {
	t.Setenv("AB_PORT_REPLICAS", "3")
	t.Setenv("AB_KEY", "sk: tricky # value")
	t.Setenv("AB_ON", "false")
	c, err := Parse([]byte(`
nats:
  url: nats://x:4222
  replicas: ${AB_PORT_REPLICAS}
ai:
  providers:
    main: {api: openai-completions, apiKey: "${AB_KEY}", baseUrl: "${AB_BASE:-http://localhost:1/v1}"}
  trigger:
    respondToAt: ${AB_ON}
  agent:
    execAllowlist: ["${AB_UNSET_TOOL}"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.Replicas != 3 || c.NATS.Embedded {
		t.Errorf("nats = %+v", c.NATS)
	}
	if p := c.AI.Providers["main"]; p.APIKey != "sk: tricky # value" || p.BaseURL != "http://localhost:1/v1" {
		t.Errorf("provider = %+v", p)
	}
	if Bool(c.AI.Trigger.RespondToAt, true) {
		t.Error("respondToAt from the environment was not applied")
	}
	if len(c.MissingEnv) != 1 || c.MissingEnv[0] != "AB_UNSET_TOOL" {
		t.Errorf("MissingEnv = %v", c.MissingEnv)
	}
	if c.AI.Agent.MaxIterations != 15 || c.AI.Agent.ExecSecurity != "deny" || c.IM.Webhook.Listen != "127.0.0.1:8088" {
		t.Errorf("defaults not applied: %+v", c.AI.Agent)
	}
}

// Whatever an environment variable holds, a string key gets exactly that text.
func TestEnvIntoStringKeys(t *testing.T) {
	for _, v := range []string{"123", "true", "~", "null", "0x1F", "1e3", "-", "a: b", "[x]"} {
		t.Setenv("AB_K", v)
		c, err := Parse([]byte("ai:\n  providers:\n    p:\n      api: faux\n      apiKey: ${AB_K}\n"))
		if err != nil {
			t.Errorf("%q: %v", v, err)
			continue
		}
		if got := c.AI.Providers["p"].APIKey; got != v {
			t.Errorf("%q became %q", v, got)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"missing api", "ai: {providers: {p: {baseUrl: x}}}", "ai.providers.p.api is required"},
		{"unknown api", "ai: {providers: {p: {api: openai}}}", `ai.providers.p.api "openai" is not known`},
		{"bus without subject", "ai: {providers: {p: {api: bus}}}", "ai.providers.p.subject is required with api: bus"},
		{"bus subject outside llm.", "ai: {providers: {p: {api: bus, subject: models.mine}}}", `ai.providers.p.subject "models.mine": want a literal NATS subject below "llm."`},
		{"bus subject with wildcard", "ai: {providers: {p: {api: bus, subject: llm.*}}}", `ai.providers.p.subject "llm.*"`},
		{"bus subject empty token", "ai: {providers: {p: {api: bus, subject: llm..x}}}", `ai.providers.p.subject "llm..x"`},
		{"subject on http api", "ai: {providers: {p: {api: openai-completions, subject: llm.x}}}", "ai.providers.p.subject is only for api: bus"},
		{"idle timeout on http api", "ai: {providers: {p: {api: openai-completions, idleTimeoutMs: 5}}}", "ai.providers.p.idleTimeoutMs 5"},
		{"binding to unknown provider", "ai: {agents: {zhin: {provider: nope, model: m}}}", `ai.agents.zhin.provider "nope"`},
		{"bad policy", "ai: {agent: {concurrency: race}}", `ai.agent.concurrency "race"`},
		{"bot without secret", "im: {webhook: {bots: [{id: b1}]}}", "im.webhook.bots[0].secret is required"},
		{"onebot without apiBase", "im: {onebot: {bots: [{id: q1}]}}", "im.onebot.bots[0].apiBase is required in mode ws"},
		{"onebot bad mode", "im: {onebot: {bots: [{id: q1, mode: grpc}]}}", `im.onebot.bots[0].mode "grpc"`},
		{"onebot id twice", "im: {onebot: {bots: [{id: q1, mode: ws-reverse, accessToken: t}, {id: q1, mode: ws-reverse, accessToken: t}]}}", `im.onebot.bots[1].id "q1" is used twice`},
		// Listeners without the platform's verification (issue 36: a sandboxed curl POSTed a
		// master's /approve to an open OneBot http listener).
		{"onebot ws-reverse without token", "im: {onebot: {bots: [{id: q1, mode: ws-reverse}]}}", "im.onebot.bots[0].accessToken is required in mode ws-reverse"},
		{"onebot ws-reverse with only a secret", "im: {onebot: {bots: [{id: q1, mode: ws-reverse, secret: s}]}}", "im.onebot.bots[0].accessToken is required in mode ws-reverse"},
		{"onebot http without token or secret", "im: {onebot: {bots: [{id: q1, mode: http, apiBase: \"http://127.0.0.1:3000\"}]}}", "im.onebot.bots[0].secret (X-Signature) or accessToken is required in mode http"},
		{"onebot http with an empty env token", "im: {onebot: {bots: [{id: q1, mode: http, apiBase: \"http://127.0.0.1:3000\", accessToken: '${NO_SUCH_TOKEN_VAR}'}]}}", "accessToken is required in mode http"},
		{"telegram webhook without secret", "im: {telegram: {bots: [{id: t1, token: x, mode: webhook}]}}", "im.telegram.bots[0].webhookSecret is required in mode webhook"},
		{"telegram without token", "im: {telegram: {bots: [{id: t1, token: '${NO_SUCH_TOKEN_VAR}'}]}}", "im.telegram.bots[0].token is required"},
		{"telegram bad preview", "im: {telegram: {bots: [{id: t1, token: x, preview: full}]}}", `im.telegram.bots[0].preview "full"`},
		{"discord without token", "im: {discord: {bots: [{id: d1}]}}", "im.discord.bots[0].token is required"},
		{"discord id twice", "im: {discord: {bots: [{id: d1, token: x}, {id: d1, token: y}]}}", `im.discord.bots[1].id "d1" is used twice`},
		{"slack socket without app token", "im: {slack: {bots: [{id: s1, botToken: x}]}}", "im.slack.bots[0].appToken is required in Socket Mode"},
		{"slack events without secret", "im: {slack: {bots: [{id: s1, botToken: x, mode: events}]}}", "im.slack.bots[0].signingSecret is required"},
		{"slack bad mode", "im: {slack: {bots: [{id: s1, botToken: x, appToken: y, mode: rtm}]}}", `im.slack.bots[0].mode "rtm"`},
		{"matrix without homeserver", "im: {matrix: {bots: [{id: m1, userId: \"@b:x\", accessToken: t}]}}", "im.matrix.bots[0].homeserver is required"},
		{"matrix bad user id", "im: {matrix: {bots: [{id: m1, homeserver: \"http://h\", userId: bot, accessToken: t}]}}", `im.matrix.bots[0].userId "bot"`},
		{"matrix without token", "im: {matrix: {bots: [{id: m1, homeserver: \"http://h\", userId: \"@b:x\"}]}}", "im.matrix.bots[0].accessToken is required"},
		{"standby without source", "nats: {url: \"nats://n:4222\", region: {name: b, standby: true}}", "nats.region.standby needs nats.region.source"},
		{"region on the embedded server", "nats: {region: {name: a}}", "nats.region needs nats.url"},
		{"negative checkpoint", "nats: {url: \"nats://n:4222\", region: {name: a, checkpointMs: -1}}", "nats.region.checkpointMs -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestProviderAPIs: the built-in api values, bus with a subject, and a name a program that
// embeds agentbus registered with llm.RegisterAPI before loading its configuration.
func TestProviderAPIs(t *testing.T) {
	for _, y := range []string{
		"ai: {providers: {p: {api: bus, subject: llm.mine}}}",
		"ai: {providers: {p: {api: bus, subject: llm.team.gpu-box, idleTimeoutMs: 90000}}}",
		"ai: {providers: {p: {api: ollama-chat, host: \"http://127.0.0.1:11434\"}}}",
	} {
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
	const custom = "acme-inhouse"
	y := []byte("ai: {providers: {p: {api: " + custom + "}}}")
	if _, err := Parse(y); err == nil || !strings.Contains(err.Error(), "llm.RegisterAPI") {
		t.Fatalf("unregistered %s: err = %v, want one naming llm.RegisterAPI", custom, err)
	}
	llm.RegisterAPI(custom, llm.ProviderFunc(func(context.Context, *llm.Model, *llm.Context, *llm.StreamOptions) iter.Seq[llm.Event] {
		return func(func(llm.Event) bool) {}
	}))
	defer llm.UnregisterAPI(custom)
	if _, err := Parse(y); err != nil {
		t.Fatalf("registered %s: %v", custom, err)
	}
}

// TestListenersAuthenticated: every adapter mode that accepts requests on agentbus's listener
// validates with its platform's verification set.
func TestListenersAuthenticated(t *testing.T) {
	for _, y := range []string{
		"im: {onebot: {bots: [{id: q1, mode: ws-reverse, accessToken: t}]}}",
		"im: {onebot: {bots: [{id: q1, mode: http, apiBase: \"http://127.0.0.1:3000\", secret: s}]}}",
		"im: {onebot: {bots: [{id: q1, mode: http, apiBase: \"http://127.0.0.1:3000\", accessToken: t}]}}",
		"im: {onebot: {bots: [{id: q1, apiBase: \"ws://127.0.0.1:3001\"}]}}", // ws: agentbus dials out
		"im: {telegram: {bots: [{id: t1, token: x, mode: webhook, webhookSecret: s}]}}",
		"im: {telegram: {bots: [{id: t1, token: x}]}}", // polling: no listener
		"im: {slack: {bots: [{id: s1, botToken: x, mode: events, signingSecret: s}]}}",
		"im: {webhook: {bots: [{id: b1, secret: s}]}}",
	} {
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
}

func TestReplayWindow(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // substring of the error; "" = valid
	}{
		{"defaults", "im:\n  webhook:\n    bots: [{id: b, secret: s}]\n", ""},
		{"derived from a longer tolerance", "im:\n  webhook:\n    toleranceSeconds: 3600\n    bots: [{id: b, secret: s}]\n", ""},
		{"window shorter than 2 × tolerance", "nats:\n  inboundDuplicatesMs: 500000\nim:\n  webhook:\n    bots: [{id: b, secret: s}]\n", "nats.inboundDuplicatesMs 500000 is shorter than 2 × im.webhook.toleranceSeconds (600000 ms)"},
		{"IM_IN max age shorter than 2 × tolerance", "nats:\n  imInMaxAgeMs: 60000\nim:\n  webhook:\n    bots: [{id: b, secret: s}]\n", "nats.imInMaxAgeMs 60000 is shorter"},
		{"no webhook bots: nothing to guard", "nats:\n  inboundDuplicatesMs: 1000\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			switch {
			case tt.want == "" && err != nil:
				t.Fatal(err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if err == nil && c.NATS.InboundDuplicatesMs < 2*int64(max(c.IM.Webhook.ToleranceSeconds, 300))*1000 && len(c.IM.Webhook.Bots) > 0 {
				t.Errorf("inboundDuplicatesMs %d does not cover the tolerance %d s", c.NATS.InboundDuplicatesMs, c.IM.Webhook.ToleranceSeconds)
			}
		})
	}
}

// A provider whose apiKey refers to an unset variable is named, with the variable, in one line;
// a set variable, a default, or a provider without such a key is fine.
func TestMissingAPIKeyError(t *testing.T) {
	t.Setenv("AB_TEST_SET_KEY", "k")
	tests := []struct {
		name, apiKey string
		want         string // substring of the error; "" = no error
	}{
		{"unset", "${AB_TEST_UNSET_KEY}", "ai.providers.p.apiKey refers to ${AB_TEST_UNSET_KEY}, which is not set"},
		{"set", "${AB_TEST_SET_KEY}", ""},
		{"default", "${AB_TEST_UNSET_KEY:-fallback}", ""},
		{"literal", "sk-literal", ""},
		{"none", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := ""
			if tt.apiKey != "" {
				key = ", apiKey: \"" + tt.apiKey + "\""
			}
			c, err := Parse([]byte("ai:\n  providers:\n    p: {api: openai-completions" + key + "}\n"))
			if err != nil {
				t.Fatal(err)
			}
			err = c.MissingAPIKeyError()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("MissingAPIKeyError() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n")):
				t.Fatalf("MissingAPIKeyError() = %v, want one line with %q", err, tt.want)
			}
		})
	}
}

func TestHooksValidate(t *testing.T) {
	base := "ai: {providers: {f: {api: faux}}, hooks: [%s]}"
	cases := []struct {
		name, hook, want string
	}{
		{"http", "{name: m, events: [message.received, 'tool:call'], url: 'http://127.0.0.1:9/h', onError: block}", ""},
		{"nats", "{name: m, events: [transformContext], nats: hooks.m, timeoutMs: 50}", ""},
		{"no name", "{events: [message.sent], url: 'http://x/h'}", "ai.hooks[0].name is required"},
		{"unknown event", "{name: m, events: [message.deleted], url: 'http://x/h'}", `"message.deleted" is not an event`},
		{"no events", "{name: m, url: 'http://x/h'}", "ai.hooks[0].events is empty"},
		{"no target", "{name: m, events: [message.sent]}", "set url (HTTP) or nats"},
		{"both targets", "{name: m, events: [message.sent], url: 'http://x/h', nats: hooks.m}", "not both"},
		{"bad url", "{name: m, events: [message.sent], url: 'ftp://x/h'}", "want an http:// or https:// URL"},
		{"subject outside hooks.", "{name: m, events: [message.sent], nats: plugins.m}", "want a subject below hooks."},
		{"wildcard subject", "{name: m, events: [message.sent], nats: hooks.*}", "want a subject below hooks."},
		{"bad onError", "{name: m, events: [message.sent], url: 'http://x/h', onError: retry}", "want continue or block"},
		{"negative timeout", "{name: m, events: [message.sent], url: 'http://x/h', timeoutMs: -1}", "timeoutMs -1"},
		{"twice", "{name: m, events: [message.sent], url: 'http://x/h'}, {name: m, events: [message.sent], url: 'http://x/h'}", `"m" is used twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(fmt.Sprintf(base, c.hook)))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
