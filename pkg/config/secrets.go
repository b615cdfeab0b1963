package config

import (
	"os"
	"strings"
)

// Secrets lists every credential the configuration holds (provider API keys and header values,
// webhook bot secrets, the NATS password and token), and the values of environment variables
// whose names say they hold one (*_API_KEY, *_TOKEN, *_SECRET, *_PASSWORD), so that error texts
// can be redacted of them (llm.Redact). Empty values are left out.
func (c *Config) Secrets() []string {
	var out []string
	add := func(v string) {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	for _, p := range c.AI.Providers {
		add(p.APIKey)
		for _, v := range p.Headers {
			add(v)
		}
	}
	for _, b := range c.IM.Webhook.Bots {
		add(b.Secret)
	}
	add(c.NATS.Password)
	add(c.NATS.Token)
	add(c.Console.Token)
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		name = strings.ToUpper(name)
		for _, suffix := range []string{"_API_KEY", "_APIKEY", "_TOKEN", "_SECRET", "_PASSWORD"} {
			if strings.HasSuffix(name, suffix) {
				add(value)
				break
			}
		}
	}
	return out
}
