package faux_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

func TestNewFromOptions(t *testing.T) {
	cfg, err := config.Parse([]byte(`
ai:
  providers:
    scripted:
      api: faux
      options:
        responder: echo
        deltaSize: 2
        responses:
          - text: "Hello!"
          - toolCalls: [{name: bash, arguments: {command: ls}}]
          - {text: "cut", stopReason: length}
          - {error: "prompt is too long: 300000 tokens > 200000 maximum"}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faux.NewFromOptions(cfg.AI.Providers["scripted"].Options)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 5; i++ {
		m := final(p, userCtx("echo me"))
		s := string(m.StopReason) + ":" + m.TextContent()
		if calls := m.ToolCalls(); len(calls) == 1 {
			s += calls[0].Name + "/" + calls[0].Arguments["command"].(string)
		}
		if m.StopReason == llm.StopReasonError {
			s += m.ErrorMessage
		}
		got = append(got, s)
	}
	want := []string{"stop:Hello!", "toolUse:bash/ls", "length:cut", "error:prompt is too long: 300000 tokens > 200000 maximum", "stop:echo me"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	for _, bad := range []map[string]any{
		{"responder": "gpt"},
		{"latncyMs": 5},
		{"responses": []any{map[string]any{"toolCalls": []any{map[string]any{"arguments": map[string]any{}}}}}},
	} {
		if _, err := faux.NewFromOptions(bad); err == nil {
			t.Errorf("%v: want error", bad)
		}
	}
	if _, err := faux.NewFromOptions(nil); err != nil {
		t.Fatal(err)
	}
}

func final(p *faux.Provider, c *llm.Context) llm.Message {
	var m llm.Message
	for ev := range p.Stream(context.Background(), model, c, nil) {
		if ev.Message != nil {
			m = *ev.Message
		}
	}
	return m
}
