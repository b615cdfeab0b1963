package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/turn"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// BotID is the webhook bot the benchmark talks to.
const BotID = "bench"

// ToolName is the trivial tool every turn calls when Config.Tool is set.
const ToolName = "bench_echo"

// Options configure a Harness (the process under test).
type Options struct {
	// Latency is the model's latency before its first event (whole milliseconds: the faux
	// provider's options block takes latencyMs).
	Latency time.Duration
	// SecondWorker starts a second turn-worker replica (Harness.Second), for the kill scenario.
	SecondWorker bool
	// TurnWorkers is how many turn-worker replicas run (default 1, at least 2 with
	// SecondWorker). They share the process and its NATS connection, but each has its own
	// consumer subscription, leases and actors, as separate processes would.
	TurnWorkers int
	// Dir holds the embedded server's store and the data directory; "" = a new temporary
	// directory removed by Close.
	Dir string
	// Log receives the roles' logs (nil: discarded; with Processes the children's logs are
	// files in <Dir>/logs).
	Log *slog.Logger

	// Processes runs every role replica as an OS process of its own, against nats-server
	// processes, instead of all in this process: this executable re-executed (Exe, ExeArgs),
	// whose main must call ChildMain first. The children die with this process.
	Processes bool
	// Cluster is how many nats-server processes run with Processes: 1 (default), or 3 for a
	// cluster routed on loopback, every stream and bucket with 3 replicas.
	Cluster int
	// Ingests, ToolWorkers and Egresses are the replicas of those roles with Processes
	// (default 1 each); TurnWorkers counts turn-worker processes then. The load generator
	// spreads its POSTs over the ingest processes' webhooks in turn.
	Ingests, ToolWorkers, Egresses int
	// ProfileDir, with Processes, receives a CPU profile of the measured phase from every child
	// process, <name>.pprof (nats1, ingest-1, turn-worker-1, ...).
	ProfileDir string
	// Exe and ExeArgs start a child ("" = os.Executable; a test binary needs "-test.run=^$").
	Exe     string
	ExeArgs []string
}

// turnWorkers is how many turn-worker replicas the options ask for.
func (o Options) turnWorkers() int {
	n := max(o.TurnWorkers, 1)
	if o.SecondWorker {
		n = max(n, 2)
	}
	return n
}

// victim is a turn-worker replica the kill scenario kills: in this process (turn.Worker.Kill)
// or a child process (SIGKILL).
type victim interface {
	ID() string
	Kill()
}

// Harness is a running agentbus process (all roles, embedded NATS) plus the benchmark's HTTP
// client and callback server.
type Harness struct {
	// Proc is the process under test when the roles run in this process (nil with
	// Options.Processes).
	Proc   *app.Process
	Second *turn.Worker // the second turn worker, with Options.SecondWorker in this process
	opts   Options

	procs    *processes // with Options.Processes
	victim   victim     // with Options.SecondWorker
	js       jetstream.JetStream
	webhooks []string
	nextHook atomic.Uint64

	secret  string
	client  *http.Client
	cbSrv   *http.Server
	cbURL   string
	tmpDir  string
	runSeq  atomic.Int64
	waiters sync.Map // message id -> *waiter
	// tag is part of every scene and message id this harness sends, so that a run on a kept
	// --dir neither meets the sessions of an earlier run nor has its messages refused as
	// replays by the inbound dedupe window.
	tag string

	modelInFlight atomic.Int64 // model streams running now
	modelCalls    atomic.Int64 // model streams started
}

// waiter is a message waiting for its reply.
type waiter struct {
	ch       chan reply // receives the first reply part
	wantBody bool
}

// reply is what the callback server saw.
type reply struct {
	at       time.Time
	usedTool bool // the reply reports the bench tool's result (only with wantBody)
}

// maxConns bounds the benchmark client's connections to the webhook.
const maxConns = 64

// Start starts the process under test.
func Start(ctx context.Context, o Options) (_ *Harness, err error) {
	h := &Harness{opts: o}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "agentbus-bench-"); err != nil {
			return nil, fmt.Errorf("bench: temp dir: %w", err)
		}
		h.tmpDir = dir
	}
	var key [16]byte
	_, _ = rand.Read(key[:])
	h.secret = hex.EncodeToString(key[:])
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	h.tag = hex.EncodeToString(tag[:])
	if err := h.startCallbackServer(); err != nil {
		return nil, err
	}
	h.client = &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:       nil,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// A platform sends over a pool of keep-alive connections, not one per chat: the
			// webhook answers 202 at once, so a bounded pool only queues POSTs briefly (that
			// wait is part of the measured latency), and the heap is not full of per-connection
			// buffers that belong to neither the pipeline nor a real deployment.
			MaxConnsPerHost:     maxConns,
			MaxIdleConns:        maxConns,
			MaxIdleConnsPerHost: maxConns,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	if o.Processes {
		if h.procs, err = startProcesses(ctx, o, dir, h.secret, h.cbURL); err != nil {
			return nil, err
		}
		h.js, h.webhooks = h.procs.js, h.procs.webhooks()
		if len(h.webhooks) == 0 {
			return nil, fmt.Errorf("bench: no ingest process announced a webhook")
		}
		if o.SecondWorker {
			for _, c := range h.procs.roles {
				if c.role == roleTurn {
					h.victim = procVictim{ps: h.procs, c: c} // the last turn worker
				}
			}
		}
		return h, nil
	}
	cfg, err := benchConfig(dir, h.secret, h.cbURL, o.Latency)
	if err != nil {
		return nil, err
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p, err := app.Start(ctx, cfg, app.Options{
		Roles: app.AllRoles, Out: io.Discard, Log: log, NoProbe: true,
		ExtraTools: []tools.Tool{echoTool()},
	})
	if err != nil {
		return nil, fmt.Errorf("bench: start agentbus: %w", err)
	}
	h.Proc = p
	h.js, h.webhooks = p.JS, []string{p.WebhookURL}
	// Count model calls: wrap the faux implementation app.Start registered from the config's
	// options block (the registry is process-wide, so one Harness at a time per process).
	inner, err := llm.LookupAPI(llm.APIFaux)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	llm.RegisterAPI(llm.APIFaux, &countingProvider{inner: inner, calls: &h.modelCalls, inFlight: &h.modelInFlight})
	n := o.turnWorkers()
	for i := 2; i <= n; i++ {
		id := "bench-" + strconv.Itoa(i)
		if i == n && o.SecondWorker {
			id = "bench-second"
		}
		if h.Second, err = p.AddTurnWorker(ctx, id); err != nil {
			return nil, fmt.Errorf("bench: turn worker %d: %w", i, err)
		}
	}
	if o.SecondWorker {
		h.victim = h.Second
	}
	return h, nil
}

// dial opens a NATS connection of its own to the server under test.
func (h *Harness) dial() (*nats.Conn, error) {
	if h.procs != nil {
		return h.procs.dial()
	}
	return h.Proc.Embedded.Connect()
}

// benchConfig is what `agentbus up` would read from a file: embedded NATS in dir, one webhook
// bot whose callback is the benchmark's server, one faux provider bound to the zhin agent.
func benchConfig(dir, secret, callback string, latency time.Duration) (*config.Config, error) {
	cfg := &config.Config{DataDir: dir}
	cfg.NATS.Embedded = true
	cfg.NATS.StoreDir = filepath.Join(dir, "nats")
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.IM.Webhook.Listen = "127.0.0.1:0"
	cfg.IM.Webhook.Bots = []config.WebhookBot{{ID: BotID, Secret: secret, Callback: callback}}
	// The benchmark is the flood: it measures the pipeline, not the webhook's rate limits.
	cfg.IM.Webhook.RateLimit.PerBot.PerSecond, cfg.IM.Webhook.RateLimit.PerSender.PerSecond = -1, -1
	cfg.IM.Webhook.MaxInFlight = 4096
	cfg.AI.Providers = map[string]config.Provider{"bench": {
		API: "faux", ContextWindow: 128000, MaxTokens: 4096,
		Models:  []config.ModelEntry{{ID: "bench", Name: "benchmark model"}},
		Options: map[string]any{"responder": "demo", "latencyMs": latency.Milliseconds()},
	}}
	cfg.AI.Agents = map[string]config.AgentBinding{"zhin": {Provider: "bench", Model: "bench"}}
	cfg.Log.Level = "error"
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: config: %w", err)
	}
	return cfg, nil
}

// countingProvider counts the streams of the provider it wraps.
type countingProvider struct {
	inner           llm.Provider
	calls, inFlight *atomic.Int64 // streams started; streams running now
}

func (c *countingProvider) Stream(ctx context.Context, m *llm.Model, lc *llm.Context, o *llm.StreamOptions) iter.Seq[llm.Event] {
	seq := c.inner.Stream(ctx, m, lc, o)
	return func(yield func(llm.Event) bool) {
		c.calls.Add(1)
		c.inFlight.Add(1)
		defer c.inFlight.Add(-1)
		for ev := range seq {
			if !yield(ev) {
				return
			}
		}
	}
}

// echoTool returns its text argument: the cheapest tool that still makes the full round trip
// through TOOL_CALLS, a tool worker and TOOL_RESULTS.
func echoTool() tools.Tool {
	return tools.Tool{
		Name:        ToolName,
		Description: "Echoes text back (benchmark tool).",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Idempotent:  true,
		Source:      "bench",
		Execute: func(_ context.Context, call tools.Call) (tools.Result, error) {
			s, _ := call.Args["text"].(string)
			return tools.TextResult(s), nil
		},
	}
}

// loadgenLabels mark the load generator's goroutines (the webhook client, the callback server)
// in CPU profiles.
var loadgenLabels = pprof.Labels("part", "loadgen")

func (h *Harness) startCallbackServer() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: callback listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /callback", h.onCallback)
	h.cbSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	h.cbURL = "http://" + ln.Addr().String() + "/callback"
	go func() {
		// The platform's side: its connection goroutines inherit the label.
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), loadgenLabels))
		_ = h.cbSrv.Serve(ln)
	}()
	return nil
}

// onCallback records the arrival of a reply. Signatures are not checked: egress signs every
// part (that cost is in the figures), checking it would only add client-side CPU.
func (h *Harness) onCallback(w http.ResponseWriter, r *http.Request) {
	var out struct {
		ReplyTo string `json:"replyTo"`
	}
	body, err := io.ReadAll(r.Body)
	now := time.Now()
	if err != nil || json.Unmarshal(body, &out) != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if v, ok := h.waiters.LoadAndDelete(out.ReplyTo); ok {
		wt := v.(*waiter)
		rp := reply{at: now}
		if wt.wantBody {
			rp.usedTool = bytes.Contains(body, []byte("The "+ToolName+" tool returned"))
		}
		wt.ch <- rp
	}
	w.WriteHeader(http.StatusOK)
}

// expect registers a waiter for message id before it is sent.
func (h *Harness) expect(id string) *waiter {
	wt := &waiter{ch: make(chan reply, 1)}
	h.waiters.Store(id, wt)
	return wt
}

// expectBody is expect for a reply whose content is looked at.
func (h *Harness) expectBody(id string) *waiter {
	wt := &waiter{ch: make(chan reply, 1), wantBody: true}
	h.waiters.Store(id, wt)
	return wt
}

func (h *Harness) forget(id string) { h.waiters.Delete(id) }

// send POSTs one signed text message from user u<session> in private scene h.scene(session).
func (h *Harness) send(ctx context.Context, id string, session int, text string) error {
	body := inboundBody(id, h.scene(session), session, text, time.Now().UnixMilli())
	hook := h.webhooks[int(h.nextHook.Add(1)%uint64(len(h.webhooks)))] // a load balancer's round robin
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook+"/webhook/"+BotID, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(h.secret, body))
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", id, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("post %s: %w: status %d", id, errRejected, resp.StatusCode)
	}
	return nil
}

var errRejected = errors.New("webhook rejected the message")

// inboundBody is json.Marshal of the webhook.Inbound a platform sends for text from user
// u<session> in the private scene given (TestInboundBody checks that): the load generator is part of the
// measured process, so it appends the few fields instead of reflecting over a struct with a
// map inside for every message.
func inboundBody(id, scene string, session int, text string, timeMs int64) []byte {
	b := make([]byte, 0, 160+len(id)+len(scene)+len(text))
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"scene":{"type":"private","id":`...)
	b = appendJSONString(b, scene)
	b = append(b, `},"sender":{"id":"u`...)
	b = strconv.AppendInt(b, int64(session), 10)
	b = append(b, `","name":"Bench `...)
	b = strconv.AppendInt(b, int64(session), 10)
	b = append(b, `"},"content":[{"type":"text","data":{"text":`...)
	b = appendJSONString(b, text)
	b = append(b, `}}],"time":`...)
	b = strconv.AppendInt(b, timeMs, 10)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it: plain ASCII by hand, anything that
// needs escaping through json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// scene is the scene id of session i (the warm-up's is -1).
func (h *Harness) scene(i int) string { return "s" + h.tag + "-" + strconv.Itoa(i) }

// sessionKey is the key ingest derives for session i.
func (h *Harness) sessionKey(i int) events.SessionKey {
	return events.SessionKey{Platform: ingest.PlatformWebhook, Bot: BotID, Scope: "private", Scene: h.scene(i)}
}

// Close stops the process and removes the temporary directory.
func (h *Harness) Close() {
	if h.Proc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := h.Proc.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "bench: stop: %v\n", err)
		}
		cancel()
		h.Proc = nil
	}
	if h.procs != nil {
		h.procs.close()
		h.procs = nil
	}
	if h.cbSrv != nil {
		_ = h.cbSrv.Close() // egress has stopped: nothing is in flight
		h.cbSrv = nil
	}
	if h.client != nil {
		h.client.CloseIdleConnections()
	}
	if h.tmpDir != "" {
		_ = os.RemoveAll(h.tmpDir)
		h.tmpDir = ""
	}
}
