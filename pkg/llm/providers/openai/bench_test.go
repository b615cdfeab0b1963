package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/tidwall/sjson"

	"github.com/agentbus/agentbus/pkg/llm"
)

// benchStream builds a recorded-looking stream: nThink reasoning deltas, nText text deltas and
// one tool call whose arguments arrive in nArgs deltas, then finish and usage chunks. It
// returns the SSE bytes and the number of delta chunks.
func benchStream(nThink, nText, nArgs int) ([]byte, int) {
	var b bytes.Buffer
	head := `{"id":"chatcmpl-Bench","object":"chat.completion.chunk","created":1764422100,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b3f1","choices":[{"index":0,"delta":`
	tail := `,"logprobs":null,"finish_reason":null}],"usage":null}`
	chunk := func(delta string) { fmt.Fprintf(&b, "data: %s%s%s\n\n", head, delta, tail) }
	chunk(`{"role":"assistant","content":""}`)
	// JSON-escaped words: one with quotes and one with a newline exercise the unescape paths.
	words := strings.Fields(`the quick brown fox jumps over the lazy dog while a \"model\" streams tokens\n`)
	for i := 0; i < nThink; i++ {
		chunk(`{"reasoning_content":" ` + words[i%len(words)] + `"}`)
	}
	for i := 0; i < nText; i++ {
		chunk(`{"content":" ` + words[i%len(words)] + `"}`)
	}
	chunk(`{"tool_calls":[{"index":0,"id":"call_bench","type":"function","function":{"name":"write_file","arguments":""}}]}`)
	chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"notes.txt\",\"content\":\""}}]}`)
	for i := 0; i < nArgs; i++ {
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"` + words[i%9] + ` "}}]}`) // plain words only: these are JSON inside a JSON string
	}
	chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]}`)
	fmt.Fprintf(&b, "data: %s{}%s\n\n", head, strings.Replace(tail, `"finish_reason":null`, `"finish_reason":"tool_calls"`, 1))
	b.WriteString(`data: {"id":"chatcmpl-Bench","object":"chat.completion.chunk","created":1764422100,"model":"gpt-4.1-2025-04-14","choices":[],"usage":{"prompt_tokens":2000,"completion_tokens":700,"total_tokens":2700,"prompt_tokens_details":{"cached_tokens":1536}}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes(), nThink + nText + nArgs + 2
}

// BenchmarkParse measures the stream parser alone on an in-memory body: "ours" is what the
// provider runs (SSE lines, chunk decoding with gjson, event building), "sdk-decode" the
// SDK's event stream and reflective chunk decoding that it replaced (issue 40), without any
// event building. MB/s of wire bytes, and ns and allocations per delta chunk.
func BenchmarkParse(b *testing.B) {
	for _, shape := range []struct {
		name                string
		think, text, toolNs int
	}{
		{"text", 0, 400, 0},
		{"thinking+text", 200, 200, 0},
		{"toolargs", 0, 0, 200},
	} {
		data, deltas := benchStream(shape.think, shape.text, shape.toolNs)
		model := &llm.Model{ID: "bench", API: llm.APIOpenAICompletions, Provider: "bench"}
		ctx := context.Background()
		run := func(b *testing.B, once func()) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				once()
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			n := float64(b.N * deltas)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/delta")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/delta")
		}
		b.Run("ours/"+shape.name, func(b *testing.B) {
			run(b, func() {
				var last llm.Event
				s := newStreamer(model, func(ev llm.Event) bool { last = ev; return true })
				s.consume(ctx, bytes.NewReader(data))
				if last.Type != llm.EventDone {
					b.Fatalf("stream ended with %s: %s", last.Type, last.Message.ErrorMessage)
				}
			})
		})
		b.Run("sdk-decode/"+shape.name, func(b *testing.B) {
			run(b, func() {
				resp := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(bytes.NewReader(data))}
				stream := ssestream.NewStream[openai.ChatCompletionChunk](ssestream.NewDecoder(resp), nil)
				n := 0
				for stream.Next() {
					n += len(stream.Current().Choices)
				}
				if stream.Err() != nil || n == 0 {
					b.Fatalf("sdk stream: %v, %d choices", stream.Err(), n)
				}
			})
		})
	}
}

// BenchmarkStreamHTTP is the whole provider path: request building, the HTTP call to an
// httptest server on loopback, streaming and parsing.
func BenchmarkStreamHTTP(b *testing.B) {
	data, deltas := benchStream(0, 400, 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(data)
	}))
	defer srv.Close()
	p := New(WithLogger(quiet))
	model := &llm.Model{ID: "bench", API: llm.APIOpenAICompletions, Provider: "bench", BaseURL: srv.URL + "/v1"}
	ctx := context.Background()
	c := hello()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var last llm.Event
		for ev := range p.Stream(ctx, model, c, nil) {
			last = ev
		}
		if last.Type != llm.EventDone {
			b.Fatalf("stream ended with %s: %s", last.Type, last.Message.ErrorMessage)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas), "ns/delta")
}

// benchHistory is a chat of turns rounds, each a user message, an assistant tool call with
// thinking, its result and the assistant's answer: the history a session sends on every model
// call.
func benchHistory(turns int) *llm.Context {
	c := &llm.Context{SystemPrompt: strings.Repeat("You are a helpful assistant. ", 20)}
	for i := 0; i < turns; i++ {
		id := fmt.Sprintf("call_%d", i)
		c.Messages = append(c.Messages,
			llm.UserText(fmt.Sprintf("Please read notes-%d.txt and summarise it, \"briefly\".", i), int64(i)),
			llm.Message{Role: llm.RoleAssistant, API: llm.APIOpenAICompletions, Provider: "bench", Model: "bench", StopReason: llm.StopReasonToolUse,
				Content: []llm.Content{
					{Type: llm.ContentThinking, Thinking: "The user wants a summary; read the file first.", ThinkingSignature: "reasoning_content"},
					llm.ToolCall(id, "read_file", map[string]any{"path": fmt.Sprintf("notes-%d.txt", i)}),
				}},
			llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: "read_file",
				Content: []llm.Content{llm.Text(strings.Repeat("Line of notes with some text.\n", 10))}},
			llm.Message{Role: llm.RoleAssistant, API: llm.APIOpenAICompletions, Provider: "bench", Model: "bench", StopReason: llm.StopReasonStop,
				Content: []llm.Content{llm.Text("The notes say the same line ten times.")}},
		)
	}
	c.Tools = []llm.Tool{{Name: "read_file", Description: "Read a file from the workspace.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the workspace"}},"required":["path"]}`)}}
	return c
}

// BenchmarkRequestBody compares encoding one request the way the provider did before issue 40
// (openai-go params, encoded by the SDK's reflective encoder, "stream" set with sjson) with the
// hand-written encoder (encode.go), for a short and a long chat history. bytes/op is the
// body's size.
func BenchmarkRequestBody(b *testing.B) {
	model := &llm.Model{ID: "bench", API: llm.APIOpenAICompletions, Provider: "bench", Reasoning: true}
	opts := &llm.StreamOptions{MaxTokens: 4096, Temperature: ptr(0.7), SessionID: "bench-session", Thinking: llm.ThinkingMedium}
	cp := detectCompat("")
	for _, turns := range []int{1, 10} {
		c := benchHistory(turns)
		size, err := requestBody(model, c, opts, cp)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("sdk/turns=%d", turns), func(b *testing.B) {
			b.SetBytes(int64(len(size)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				params, err := buildParams(model, c, opts, cp)
				if err != nil {
					b.Fatal(err)
				}
				raw, err := json.Marshal(params)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sjson.SetBytes(raw, "stream", true); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("direct/turns=%d", turns), func(b *testing.B) {
			b.SetBytes(int64(len(size)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				raw, err := requestBody(model, c, opts, cp)
				if err != nil {
					b.Fatal(err)
				}
				_ = raw
			}
		})
	}
}
