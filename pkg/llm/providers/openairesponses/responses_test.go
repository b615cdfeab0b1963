package openairesponses

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
)

func testModel(base string) *llm.Model {
	return &llm.Model{ID: "gpt-5-mini", API: llm.APIOpenAIResponses, Provider: "openai", BaseURL: base + "/v1", Reasoning: true,
		Input: []string{"text", "image"}, Cost: llm.ModelCost{Input: 0.25, Output: 2, CacheRead: 0.025}}
}

func run(t *testing.T, fixture string, c *llm.Context, opts *llm.StreamOptions) (*llm.Message, map[string]any) {
	t.Helper()
	f, err := providertest.LoadFixture("testdata", fixture)
	if err != nil {
		t.Fatal(err)
	}
	srv := providertest.NewServer(t, f)
	if opts == nil {
		opts = &llm.StreamOptions{}
	}
	opts.APIKey = providertest.TestKey
	_, final := providertest.Collect(t, context.Background(), New(), testModel(srv.URL), c, opts)
	var req map[string]any
	if err := json.Unmarshal(srv.LastRequest(), &req); err != nil {
		t.Fatal(err)
	}
	return final, req
}

func hello() *llm.Context {
	return &llm.Context{SystemPrompt: "be brief", Messages: []llm.Message{llm.UserText("hi", 1)}}
}

func TestReasoningItemsReplayed(t *testing.T) {
	think, req := run(t, "thinking", hello(), &llm.StreamOptions{Thinking: llm.ThinkingHigh, SessionID: "sess-1"})
	if req["store"] != false || req["prompt_cache_key"] != "sess-1" {
		t.Errorf("store %v prompt_cache_key %v", req["store"], req["prompt_cache_key"])
	}
	if inc, _ := req["include"].([]any); len(inc) != 1 || inc[0] != "reasoning.encrypted_content" {
		t.Errorf("include %v", req["include"])
	}
	if r, _ := req["reasoning"].(map[string]any); r["effort"] != "high" || r["summary"] != "auto" {
		t.Errorf("reasoning %v", req["reasoning"])
	}
	rb := think.Content[0]
	if rb.Type != llm.ContentThinking || !strings.Contains(rb.Thinking, "simple arithmetic") || !strings.Contains(rb.ThinkingSignature, `"encrypted_content":"gAAAA`) {
		t.Fatalf("reasoning block %+v", rb)
	}
	tool, _ := run(t, "tool_call", hello(), nil)
	id := tool.ToolCalls()[0].ID
	if id != "call_Xy12Ab34Cd56Ef78Gh90Ij12|fc_68b2c7dc2d3e4f5a6b7c8d9e0f1a2b3c" {
		t.Fatalf("tool call id %q, want call_id|item_id", id)
	}
	if u := tool.Usage; u.Input != 120-64 || u.CacheRead != 64 || u.Output != 30 {
		t.Errorf("usage %+v", u)
	}
	c := hello()
	c.Messages = append(c.Messages, *think, *tool,
		llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: "get_weather", Content: []llm.Content{llm.Text("sunny")}})
	_, req = run(t, "text", c, nil)
	input := req["input"].([]any)
	var types []string
	for _, it := range input {
		m := it.(map[string]any)
		typ, _ := m["type"].(string)
		if typ == "" {
			typ = "message:" + m["role"].(string)
		}
		types = append(types, typ)
		switch typ {
		case "reasoning":
			if m["id"] != "rs_68b2c7da0b1c2d3e4f5a6b7c8d9e0f1a" || !strings.HasPrefix(m["encrypted_content"].(string), "gAAAA") {
				t.Errorf("reasoning item %v", m)
			}
		case "message":
			if m["id"] != "msg_68b2c7db1c2d3e4f5a6b7c8d9e0f1a2b" {
				t.Errorf("output message %v", m)
			}
		case "function_call":
			if m["call_id"] != "call_Xy12Ab34Cd56Ef78Gh90Ij12" || m["id"] != "fc_68b2c7dc2d3e4f5a6b7c8d9e0f1a2b3c" {
				t.Errorf("function_call %v", m)
			}
		case "function_call_output":
			if m["call_id"] != "call_Xy12Ab34Cd56Ef78Gh90Ij12" || m["output"] != "sunny" {
				t.Errorf("function_call_output %v", m)
			}
		}
	}
	want := "message:user reasoning message function_call function_call_output"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("input items %q, want %q", got, want)
	}
}

func TestIncompleteIsLength(t *testing.T) {
	final, _ := run(t, "incomplete", hello(), nil)
	if final.StopReason != llm.StopReasonLength || final.TextContent() != "Once upon a" {
		t.Errorf("final %s %q", final.StopReason, final.TextContent())
	}
}

func TestFailedAndErrorEvents(t *testing.T) {
	for name, tail := range map[string]string{
		"failed": "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The model produced invalid content.\"},\"output\":[],\"usage\":null}}\n\n",
		"error":  "event: error\ndata: {\"type\":\"error\",\"sequence_number\":3,\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached\",\"param\":null}\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			f, _ := providertest.LoadFixture("testdata", "text")
			evs := providertest.SplitEvents(f.Body)
			f.Body = []byte(strings.Join([]string{string(evs[0]), string(evs[1]), tail}, ""))
			srv := providertest.NewServer(t, f)
			_, final := providertest.Collect(t, context.Background(), New(), testModel(srv.URL), hello(), &llm.StreamOptions{APIKey: "k"})
			if final.StopReason != llm.StopReasonError || final.ErrorMessage == "" {
				t.Errorf("final %s %q", final.StopReason, final.ErrorMessage)
			}
		})
	}
}
