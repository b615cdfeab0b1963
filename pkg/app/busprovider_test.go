package app_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/openai"
	"github.com/agentbus/agentbus/pkg/llmbus"
)

// TestBusProviderTurn: the agent's model is a provider on the bus (api: bus, subject
// llm.e2e). A service on its own connection serves it with llmbus.Serve: the
// openai-completions provider pointed at a fake OpenAI server, with the service's own key. A
// message through the webhook is answered through the whole pipeline by that service; the
// turn worker's NATS user reaches it with its role's permissions.
func TestBusProviderTurn(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{busSubject: "llm.e2e"})
	nc, err := pl.p.Embedded.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	var seen []string // models as the service received them
	svc, err := llmbus.Serve(ctx, nc, "llm.e2e", openai.New(),
		llmbus.WithModel(func(m *llm.Model) {
			mu.Lock()
			seen = append(seen, m.API+"/"+m.Provider+"/"+m.ID)
			mu.Unlock()
			m.BaseURL = pl.model.BaseURL()
		}),
		llmbus.WithStreamOptions(func(o *llm.StreamOptions) { o.APIKey = "service-own-key" }))
	if err != nil {
		t.Fatal(err)
	}

	pl.post(private("m1", "u1", "hello over the bus"))
	if got := pl.replies(1)[0].Text(); got != "echo: hello over the bus" {
		t.Errorf("reply text = %q", got)
	}
	req := pl.requests(1)[0]
	if auth := req.Header.Get("Authorization"); auth != "Bearer service-own-key" {
		t.Errorf("Authorization = %q, want the service's own key", auth)
	}
	if len(req.Messages) == 0 || req.Messages[0].Role != "system" || !strings.Contains(req.LastUser(), "hello over the bus") {
		t.Errorf("model request messages: %s", req.Text())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "bus/fake/m1" {
		t.Errorf("the service saw models %v, want bus/fake/m1", seen)
	}
	if st := svc.Stats(); len(st.Endpoints) != 1 || st.Endpoints[0].NumRequests != 1 {
		t.Errorf("service stats %+v, want one request", st.Endpoints)
	}
	pl.settle(1)
}
