package config

import (
	"net/url"
	"strconv"
	"strings"
)

// Hook is one ai.hooks entry: a plugin called at the steps named in Events, over HTTP (URL)
// or NATS request-reply (NATS), in the order of the list. pkg/hooks runs them; docs/hooks.md
// has the contract.
//
//	ai:
//	  hooks:
//	    - name: moderation
//	      events: [message.received, message.sending]
//	      url: http://127.0.0.1:9100/hook   # or: nats: hooks.moderation
//	      secret: ${HOOK_SECRET}            # optional; Standard Webhooks signature
//	      timeoutMs: 2000                   # default 2000
//	      onError: continue                 # continue | block
type Hook struct {
	Name      string   `yaml:"name"`
	Events    []string `yaml:"events"`
	URL       string   `yaml:"url"`
	NATS      string   `yaml:"nats"`
	Secret    string   `yaml:"secret"`
	TimeoutMs int      `yaml:"timeoutMs"`
	OnError   string   `yaml:"onError"`
}

// DefaultHookTimeoutMs is a hook's timeoutMs when unset.
const DefaultHookTimeoutMs = 2000

// HookSubjectPrefix is where NATS hooks live: every role's bus user may publish below it
// (pkg/natsutil), and nothing else of agentbus does.
const HookSubjectPrefix = "hooks."

// hookEvents maps every accepted event name (the dotted names and the seed's aliases) to its
// dotted name. pkg/hooks has the same names as constants (a test there keeps them equal).
var hookEvents = map[string]string{
	"message.received":  "message.received",
	"message.sending":   "message.sending",
	"message.sent":      "message.sent",
	"tool.before":       "tool.before",
	"tool.after":        "tool.after",
	"session.new":       "session.new",
	"session.compact":   "session.compact",
	"agent.bootstrap":   "agent.bootstrap",
	"context.transform": "context.transform",
	// The seed's names.
	"message:received":   "message.received",
	"message:sending":    "message.sending",
	"message:sent":       "message.sent",
	"tool:call":          "tool.before",
	"tool:before":        "tool.before",
	"tool:after":         "tool.after",
	"ai.session.new":     "session.new",
	"ai.session.compact": "session.compact",
	"session:new":        "session.new",
	"session:compact":    "session.compact",
	"agent:bootstrap":    "agent.bootstrap",
	"context:transform":  "context.transform",
	"transformContext":   "context.transform",
}

// HookEvent returns the dotted name of an ai.hooks event name or alias.
func HookEvent(name string) (string, bool) {
	e, ok := hookEvents[strings.TrimSpace(name)]
	return e, ok
}

// HookEventNames are the dotted names, in the order docs/hooks.md lists them.
var HookEventNames = []string{"message.received", "message.sending", "message.sent", "tool.before", "tool.after",
	"session.new", "session.compact", "agent.bootstrap", "context.transform"}

func validateHooks(hs []Hook, bad func(string, ...any)) {
	seen := map[string]bool{}
	for i, h := range hs {
		key := "ai.hooks[" + strconv.Itoa(i) + "]"
		switch {
		case h.Name == "":
			bad("%s.name is required", key)
		case seen[h.Name]:
			bad("%s.name %q is used twice", key, h.Name)
		}
		seen[h.Name] = true
		if len(h.Events) == 0 {
			bad("%s.events is empty: name at least one of %s", key, strings.Join(HookEventNames, ", "))
		}
		for _, e := range h.Events {
			if _, ok := HookEvent(e); !ok {
				bad("%s.events: %q is not an event (one of %s)", key, e, strings.Join(HookEventNames, ", "))
			}
		}
		switch {
		case h.URL == "" && h.NATS == "":
			bad("%s: set url (HTTP) or nats (a request-reply subject)", key)
		case h.URL != "" && h.NATS != "":
			bad("%s: set url or nats, not both", key)
		case h.URL != "":
			if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("%s.url %q: want an http:// or https:// URL", key, h.URL)
			}
		default:
			if !strings.HasPrefix(h.NATS, HookSubjectPrefix) || strings.ContainsAny(h.NATS, " *>") || strings.HasSuffix(h.NATS, ".") {
				bad("%s.nats %q: want a subject below %s (hooks.moderation); roles may publish only there", key, h.NATS, HookSubjectPrefix)
			}
		}
		if h.TimeoutMs < 0 {
			bad("%s.timeoutMs %d: want a positive number of milliseconds (default %d)", key, h.TimeoutMs, DefaultHookTimeoutMs)
		}
		switch h.OnError {
		case "", "continue", "block":
		default:
			bad("%s.onError %q: want continue or block", key, h.OnError)
		}
	}
}
