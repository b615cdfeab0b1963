package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/openai"
	"github.com/agentbus/agentbus/pkg/logging"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// The bus-less relay of `agentbus bench --outside`: the same outside shape as `agentbus up`
// (a signed webhook POST in, the model over the real openai-completions provider through
// pkg/loop, with the same tool when the model calls one, each chat's history sent with every
// call, a signed callback POST out) in one process with no NATS and nothing stored: the
// history is kept in memory. It is what the outside path would cost if the
// bus were free, the baseline the ratio divides by.
const (
	envRelayModel     = "AGENTBUS_BENCH_RELAY_MODEL"     // the model server's base URL (…/v1)
	envRelayWorkspace = "AGENTBUS_BENCH_RELAY_WORKSPACE" // read_file's root
)

// relayToolSchema is read_file's parameters as far as the benchmark uses them.
const relayToolSchema = `{"type":"object","properties":{"path":{"type":"string","description":"file path, relative to the workspace"}},"required":["path"]}`

// relayChild serves the relay until ctx ends. It prints READY <webhook base URL>.
func relayChild(ctx context.Context) error {
	secret, cb, model, ws := os.Getenv(envSecret), os.Getenv(envCallback), os.Getenv(envRelayModel), os.Getenv(envRelayWorkspace)
	if secret == "" || cb == "" || model == "" || ws == "" {
		return fmt.Errorf("relay: %s, %s, %s and %s must be set", envSecret, envCallback, envRelayModel, envRelayWorkspace)
	}
	r := newRelay(secret, cb, model, ws)
	// One line per turn at info, as agentbus up's turn worker writes (the bench runs up at the
	// default level, so both sides pay for a log line per turn).
	if l, err := logging.New(os.Stderr, "text", "info"); err == nil {
		r.log = l
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhook/{bot}", r.serve)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	childproc.Ready("http://" + ln.Addr().String())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	r.wg.Wait()
	return nil
}

type relay struct {
	secret, callback string
	cfg              loop.Config
	tools            []loop.AgentTool
	client           *http.Client
	log              *slog.Logger
	wg               sync.WaitGroup
	// chats is each chat's conversation, in memory: the model is sent the whole history on
	// every call, as agentbus up sends it (a gateway without one would answer every message
	// as the first of its chat).
	mu    sync.Mutex
	chats map[string][]llm.Message
	seq   atomic.Int64
}

func newRelay(secret, callback, modelURL, workspace string) *relay {
	transport := &http.Transport{Proxy: nil, MaxIdleConns: maxConns, MaxIdleConnsPerHost: maxConns, IdleConnTimeout: 90 * time.Second}
	p := openai.New(openai.WithHTTPClient(&http.Client{Transport: transport}))
	r := &relay{
		secret: secret, callback: callback, chats: map[string][]llm.Message{},
		client: &http.Client{Timeout: 30 * time.Second, Transport: transport.Clone()},
		cfg: loop.Config{
			Model:     &llm.Model{ID: "bench", Name: "benchmark model", API: llm.APIOpenAICompletions, Provider: "bench", BaseURL: modelURL, ContextWindow: 128000, MaxTokens: 4096},
			StreamFn:  p.Stream,
			GetAPIKey: func(string) string { return "bench" },
		},
	}
	r.tools = []loop.AgentTool{{
		Tool:  llm.Tool{Name: outsideTool, Description: "Reads a file of the workspace.", Parameters: json.RawMessage(relayToolSchema)},
		Label: "Read file",
		Execute: func(_ context.Context, _ string, args map[string]any, _ func(loop.ToolResult)) (loop.ToolResult, error) {
			name, _ := args["path"].(string)
			b, err := os.ReadFile(filepath.Join(workspace, filepath.Clean("/"+name)))
			if err != nil {
				return loop.ToolResult{}, err
			}
			return loop.TextResult(string(b)), nil
		},
	}}
	return r
}

// serve is the webhook: the checks ingest makes (body bound, Standard Webhooks signature and
// timestamp, the message's fields), 202 at once, then the turn in the background.
func (r *relay) serve(w http.ResponseWriter, req *http.Request) {
	bot := req.PathValue("bot")
	body, err := io.ReadAll(io.LimitReader(req.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if _, _, err := webhook.VerifyStandard(r.secret, body, req.Header, time.Now(), webhook.DefaultTolerance); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	in, err := webhook.ParseInbound(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var text strings.Builder
	for _, s := range in.Content {
		if t, ok := s.Data["text"].(string); ok && s.Type == "text" {
			text.WriteString(t)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"accepted":true}`)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.turn(bot, in, text.String())
	}()
}

// turn runs the loop on the message after the chat's history and POSTs the reply, signed as
// egress signs it.
func (r *relay) turn(bot string, in *webhook.Inbound, text string) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := bot + "\x00" + in.Scene.Type + "\x00" + in.Scene.ID
	r.mu.Lock()
	history := r.chats[key]
	r.mu.Unlock()
	ac := &loop.AgentContext{SystemPrompt: "You are a helpful assistant.", Messages: history, Tools: r.tools}
	msgs, err := loop.Run(ctx, []llm.Message{llm.UserText(text, in.Time)}, ac, &r.cfg, nil)
	if err == nil {
		r.mu.Lock()
		r.chats[key] = append(history[:len(history):len(history)], msgs...)
		r.mu.Unlock()
	}
	reply := ""
	for i := len(msgs) - 1; i >= 0 && err == nil; i-- {
		if msgs[i].Role == llm.RoleAssistant {
			for _, c := range msgs[i].Content {
				reply += c.Text
			}
			break
		}
	}
	if err != nil || reply == "" {
		reply = fmt.Sprintf("error: %v", err)
	}
	out := webhook.Outbound{
		ID: "relay-" + strconv.FormatInt(r.seq.Add(1), 10), ReplyTo: in.ID, Bot: bot, Scene: in.Scene,
		Content: []webhook.Segment{{Type: "text", Data: map[string]any{"text": reply}}},
	}
	body, _ := json.Marshal(out)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.callback, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(r.secret, body))
	resp, err := r.client.Do(req)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if r.log != nil {
		calls := 0
		for i := range msgs {
			if msgs[i].Role == llm.RoleAssistant {
				calls++
			}
		}
		r.log.Info("turn finished", "reply_to", in.ID, "model_calls", calls, "duration", time.Since(start).Round(time.Millisecond))
	}
}

// modelServer is an OpenAI-compatible chat completions endpoint at the protocol level (SSE
// chunks as the real servers send them), answering at once: a text reply, or with tool set a
// call of outsideTool when the conversation's last message is the user's. It runs in the
// benchmark's own process, so its CPU is counted for neither side.
type modelServer struct {
	srv   *http.Server
	url   string
	tool  atomic.Bool
	calls atomic.Int64
	bytes atomic.Int64 // request bodies received
	n     atomic.Int64
}

func startModelServer() (*modelServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: model server: %w", err)
	}
	m := &modelServer{url: "http://" + ln.Addr().String() + "/v1"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", m.chat)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

func (m *modelServer) close() { _ = m.srv.Close() }

var lastRoleKey = []byte(`"role":"`)

func (m *modelServer) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	m.calls.Add(1)
	m.bytes.Add(int64(len(body)))
	role := ""
	if i := bytes.LastIndex(body, lastRoleKey); i >= 0 {
		rest := body[i+len(lastRoleKey):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			role = string(rest[:j])
		}
	}
	id := strconv.FormatInt(m.n.Add(1), 10)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	head := `data: {"id":"c` + id + `","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,`
	var b strings.Builder
	b.WriteString(head + `"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	finish := "stop"
	if m.tool.Load() && role == "user" {
		finish = "tool_calls"
		b.WriteString(head + `"delta":{"tool_calls":[{"index":0,"id":"call_` + id + `","type":"function","function":{"name":"` + outsideTool + `","arguments":"{\"path\":"}}]},"finish_reason":null}]}` + "\n\n")
		b.WriteString(head + `"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"` + outsideFile + `\"}"}}]},"finish_reason":null}]}` + "\n\n")
	} else {
		b.WriteString(head + `"delta":{"content":"Sure, here is "},"finish_reason":null}]}` + "\n\n")
		b.WriteString(head + `"delta":{"content":"the answer."},"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString(head + `"delta":{},"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	_, _ = io.WriteString(w, b.String())
}
