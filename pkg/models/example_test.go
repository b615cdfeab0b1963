package models_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/costs"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/models"
)

// Wiring as the turn worker does it: cost tracking around the provider call, fallback around
// that, the result used as the loop's stream function.
func Example_wiring() {
	cfg, _ := config.Parse([]byte(`
ai:
  providers:
    demo:
      api: faux
      models: [busy-model, calm-model]
  agents:
    zhin: {provider: demo, model: busy-model}
`))
	reg, _ := models.NewRegistry(cfg.AI.Providers)
	p := faux.New(faux.WithResponses(
		faux.Response{Error: "HTTP 429 Too Many Requests: slow down"},
		faux.Response{Text: "hello"},
	))
	tracker := costs.New()
	fb := models.NewFallback(models.FallbackOptions{
		Registry: reg,
		Stream:   models.StreamFunc(tracker.Wrap(p.Stream)),
		Log:      slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: dropTime})),
	})
	var stream loop.StreamFunc = fb.Stream

	name, model, _ := models.Route(cfg.AI, reg, nil)
	msg := llm.Message{}
	for ev := range stream(context.Background(), model, &llm.Context{Messages: []llm.Message{llm.UserText("hi", 1)}}, nil) {
		if ev.Message != nil {
			msg = *ev.Message
		}
	}
	fmt.Println(name, "answered by", msg.Model+":", msg.TextContent())
	for _, s := range tracker.Snapshot() {
		fmt.Println(s.Model, "calls", s.Calls, "errors", s.Errors)
	}
	// Output:
	// level=WARN msg="fallback: demo/busy-model→demo/calm-model" from=demo/busy-model to=demo/calm-model reason=rate_limit kind=chat attempt=2 error="HTTP 429 Too Many Requests: slow down"
	// zhin answered by calm-model: hello
	// busy-model calls 1 errors 1
	// calm-model calls 1 errors 0
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
