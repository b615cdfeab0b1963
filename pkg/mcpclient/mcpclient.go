// Package mcpclient offers the tools of external MCP servers (ai.mcpServers) as agentbus
// tools, using the official Go SDK (github.com/modelcontextprotocol/go-sdk/mcp).
//
// Transports: stdio (the server is a child process, mcp.CommandTransport), sse
// (mcp.SSEClientTransport) and streamable-http (mcp.StreamableClientTransport). Without an
// explicit transport, a command means stdio and a URL means streamable-http.
//
// Tools are named mcp_{server}_{tool}, reduced to [a-zA-Z0-9_-] and at most 64 characters (a
// short hash keeps shortened names unique). Connection is lazy: Manager.Tools, called before
// the tool worker starts and then every RefreshInterval through Manager.Sync, connects servers
// on first use, caches each session and its tool list (re-listed on the server's list-changed
// notification or after RelistInterval), and reconnects a server whose session failed (after
// RetryInterval, doubling per failure up to MaxBackoff, so a dead server is not hammered and
// does not slow anything). A server that was down at start-up gets its tools served once it
// answers, without a restart. A server that is down never crashes anything: its tools (when known from
// an earlier listing) return "MCP server X is unavailable: ..." as an error result, and
// Status says why.
//
// Security notes: a stdio server gets a minimal environment (PATH, HOME, LANG, TMPDIR, USER)
// plus its configured env, never the agent's secrets. HTTP servers are configured by the
// operator and are reached directly, not through the SSRF guard (they often run on localhost).
package mcpclient

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/tools"
)

// Transport names of config.MCPServer.Transport.
const (
	TransportStdio          = "stdio"
	TransportSSE            = "sse"
	TransportStreamableHTTP = "streamable-http"
)

// ErrUnavailable is wrapped by the errors of a server that cannot be reached.
var ErrUnavailable = errors.New("MCP server unavailable")

// ErrBadConfig is wrapped by configuration errors.
var ErrBadConfig = errors.New("bad MCP server config")

// TransportFunc makes a fresh transport for one connection attempt.
type TransportFunc func() (mcp.Transport, error)

// Options tune a Manager.
type Options struct {
	Log *slog.Logger
	// ConnectTimeout bounds connecting and listing tools (default 10s; a server's timeoutMs
	// overrides it).
	ConnectTimeout time.Duration
	// CallTimeout bounds one tool call (default 60s; a server's timeoutMs overrides it).
	CallTimeout time.Duration
	// RetryInterval is the least time between connection attempts to a failed server
	// (default 15s). It doubles with every further failure of the server, up to MaxBackoff.
	RetryInterval time.Duration
	// MaxBackoff caps the wait between attempts to a server that keeps failing (default 5m).
	MaxBackoff time.Duration
	// RefreshInterval is how often Sync lists the servers' tools again (default 30s).
	RefreshInterval time.Duration
	// RelistInterval re-lists the tools of a connected server that sent no list-changed
	// notification for this long (default 5m): not every server sends them.
	RelistInterval time.Duration
	// Now is a clock for tests.
	Now func() time.Time
}

// Manager owns the MCP client sessions. It is safe for concurrent use.
type Manager struct {
	opts    Options
	client  *mcp.Client
	mu      sync.Mutex
	servers map[string]*server
}

type server struct {
	name      string
	connect   TransportFunc
	callTO    time.Duration
	connectTO time.Duration

	mu        sync.Mutex
	session   *mcp.ClientSession
	tools     []*mcp.Tool // last successful listing
	stale     atomic.Bool // the server said its tool list changed
	lastErr   error
	cancel    context.CancelFunc // ends the session's context
	lastTry   time.Time
	listedAt  time.Time // when tools was last listed
	failures  int       // connection failures in a row (backoff)
	connected bool
}

// retryAfter is how long to wait after the server's last failed attempt: RetryInterval,
// doubled per further failure, capped at MaxBackoff. Called with s.mu held.
func (s *server) retryAfter(o Options) time.Duration {
	d := o.RetryInterval
	for i := 1; i < s.failures && d < o.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, o.MaxBackoff)
}

// New builds a manager for the configured servers (disabled ones are skipped). Nothing is
// connected yet. A server config that names no command or URL, or an unknown transport, is
// an error naming the server.
func New(servers map[string]config.MCPServer, o Options) (*Manager, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 60 * time.Second
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = 15 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 30 * time.Second
	}
	if o.RelistInterval <= 0 {
		o.RelistInterval = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &Manager{opts: o, servers: map[string]*server{}}
	m.client = mcp.NewClient(&mcp.Implementation{Name: "agentbus", Version: "1.0.0"}, &mcp.ClientOptions{
		Logger: o.Log,
		ToolListChangedHandler: func(ctx context.Context, req *mcp.ToolListChangedRequest) {
			m.markStale(req.Session)
		},
	})
	names := make([]string, 0, len(servers))
	for n := range servers {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		c := servers[n]
		if c.Disabled {
			continue
		}
		tf, err := transportFor(n, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		to := time.Duration(c.TimeoutMs) * time.Millisecond
		m.add(n, tf, to)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}

// AddServer registers a server reached through connect (an in-process or custom transport).
// timeout 0 uses the manager's defaults.
func (m *Manager) AddServer(name string, connect TransportFunc, timeout time.Duration) {
	m.add(name, connect, timeout)
}

func (m *Manager) add(name string, tf TransportFunc, to time.Duration) {
	s := &server{name: name, connect: tf, callTO: m.opts.CallTimeout, connectTO: m.opts.ConnectTimeout}
	if to > 0 {
		s.callTO, s.connectTO = to, to
	}
	m.mu.Lock()
	m.servers[name] = s
	m.mu.Unlock()
}

// markStale flags every server for a re-listing on the next turn. It runs on the SDK's
// notification goroutine, possibly while ensure holds a server's lock, so it takes none.
func (m *Manager) markStale(*mcp.ClientSession) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.servers {
		s.stale.Store(true)
	}
}

// headerTransport adds configured headers (e.g. Authorization) to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// minimalEnv is what a stdio server inherits from agentbus.
var minimalEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "TZ"}

func transportFor(name string, c config.MCPServer) (TransportFunc, error) {
	kind := strings.ToLower(c.Transport)
	if kind == "" {
		switch {
		case c.Command != "":
			kind = TransportStdio
		case c.URL != "":
			kind = TransportStreamableHTTP
		}
	}
	if kind == "http" || kind == "streamablehttp" || kind == "streamable_http" {
		kind = TransportStreamableHTTP
	}
	httpClient := func() *http.Client {
		var rt http.RoundTripper = http.DefaultTransport
		if len(c.Headers) > 0 {
			rt = headerTransport{base: rt, headers: c.Headers}
		}
		return &http.Client{Transport: rt}
	}
	switch kind {
	case TransportStdio:
		if c.Command == "" {
			return nil, fmt.Errorf("%w: ai.mcpServers.%s: command is required for transport stdio", ErrBadConfig, name)
		}
		return func() (mcp.Transport, error) {
			cmd := exec.Command(c.Command, c.Args...)
			for _, k := range minimalEnv {
				if v, ok := os.LookupEnv(k); ok {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
			}
			for k, v := range c.Env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil
		}, nil
	case TransportSSE:
		if c.URL == "" {
			return nil, fmt.Errorf("%w: ai.mcpServers.%s: url is required for transport sse", ErrBadConfig, name)
		}
		return func() (mcp.Transport, error) {
			return &mcp.SSEClientTransport{Endpoint: c.URL, HTTPClient: httpClient()}, nil
		}, nil
	case TransportStreamableHTTP:
		if c.URL == "" {
			return nil, fmt.Errorf("%w: ai.mcpServers.%s: url is required for transport streamable-http", ErrBadConfig, name)
		}
		return func() (mcp.Transport, error) {
			// Reconnection is ours (lazy, per turn); the SDK's own retries would only delay the
			// "unavailable" answer.
			return &mcp.StreamableClientTransport{Endpoint: c.URL, HTTPClient: httpClient(), MaxRetries: -1}, nil
		}, nil
	case "":
		return nil, fmt.Errorf("%w: ai.mcpServers.%s: set command (stdio) or url (sse, streamable-http)", ErrBadConfig, name)
	}
	return nil, fmt.Errorf("%w: ai.mcpServers.%s: transport %q (want stdio, sse or streamable-http)", ErrBadConfig, name, c.Transport)
}

// ensure returns a live session, connecting (and listing tools) when needed. It respects
// RetryInterval after a failure unless force is set.
func (m *Manager) ensure(ctx context.Context, s *server, force bool) (*mcp.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.opts.Now()
	if s.session != nil && !s.stale.Load() && now.Sub(s.listedAt) < m.opts.RelistInterval {
		return s.session, nil
	}
	if s.session == nil && s.lastErr != nil && !force && now.Sub(s.lastTry) < s.retryAfter(m.opts) {
		return nil, s.lastErr
	}
	s.lastTry = now
	cctx, cancel := context.WithTimeout(ctx, s.connectTO)
	defer cancel()
	cs := s.session
	if cs == nil {
		// Some transports (SSE) tie the connection's lifetime to the context given to
		// Connect, so the session gets its own context, detached from the turn and canceled
		// when the session is dropped; the connect timeout is a timer on it.
		sessCtx, sessCancel := context.WithCancel(context.WithoutCancel(ctx))
		timer := time.AfterFunc(s.connectTO, sessCancel)
		t, err := s.connect()
		if err == nil {
			cs, err = m.client.Connect(sessCtx, t, nil)
		}
		if !timer.Stop() && err == nil {
			err = fmt.Errorf("connect timed out after %s", s.connectTO)
			_ = cs.Close()
		}
		if err != nil {
			sessCancel()
			s.failures++
			s.lastErr = fmt.Errorf("%w: MCP server %s is unavailable: %v", ErrUnavailable, s.name, err)
			m.opts.Log.Warn("mcp connect failed", "server", s.name, "err", err, "retry_in", s.retryAfter(m.opts))
			return nil, s.lastErr
		}
		s.session, s.cancel = cs, sessCancel
		go func() {
			// When the session ends (process exit, HTTP session gone), forget it so the next
			// turn reconnects.
			_ = cs.Wait()
			sessCancel()
			s.mu.Lock()
			if s.session == cs {
				s.session = nil
				s.lastErr = fmt.Errorf("%w: MCP server %s is unavailable: connection closed", ErrUnavailable, s.name)
			}
			s.mu.Unlock()
		}()
	}
	var list []*mcp.Tool
	for t, err := range cs.Tools(cctx, nil) {
		if err != nil {
			_ = cs.Close()
			s.session = nil
			s.failures++
			s.lastErr = fmt.Errorf("%w: MCP server %s is unavailable: list tools: %v", ErrUnavailable, s.name, err)
			return nil, s.lastErr
		}
		list = append(list, t)
	}
	if !s.connected || s.failures > 0 || len(list) != len(s.tools) {
		m.opts.Log.Info("mcp server connected", "server", s.name, "tools", len(list))
	}
	s.tools, s.lastErr, s.connected, s.failures, s.listedAt = list, nil, true, 0, now
	s.stale.Store(false)
	return cs, nil
}

// drop forgets a session after a transport failure.
func (s *server) drop(cs *mcp.ClientSession, err error) {
	s.mu.Lock()
	if s.session == cs {
		s.session = nil
		s.lastErr = fmt.Errorf("%w: MCP server %s is unavailable: %v", ErrUnavailable, s.name, err)
	}
	s.mu.Unlock()
	_ = cs.Close()
}

// Tools connects servers as needed (in parallel) and returns every known MCP tool, sorted by
// name. A server that cannot be reached contributes the tools of its last successful listing
// (whose calls then report it unavailable), or none if it was never reached; it never fails
// the call.
func (m *Manager) Tools(ctx context.Context) []tools.Tool {
	m.mu.Lock()
	servers := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		servers = append(servers, s)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = m.ensure(ctx, s, false)
		}()
	}
	wg.Wait()
	var out []tools.Tool
	used := map[string]bool{}
	for _, s := range servers {
		s.mu.Lock()
		list := s.tools
		s.mu.Unlock()
		for _, t := range list {
			out = append(out, m.wrap(s, t, used))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Registry is the part of *tools.Registry Sync keeps up to date.
type Registry interface {
	List() []tools.Tool
	Put(t tools.Tool) error
	Remove(name string) bool
}

// Sync keeps reg's MCP tools (Source "mcp:...") equal to what the servers offer, until ctx
// ends: every RefreshInterval it lists them again (connecting servers that were down, with
// each server's backoff, and re-listing stale ones) and puts new or changed tools, removing
// those no server offers any more. A tool worker serving reg picks the changes up at its next
// heartbeat, so a server that was down at start-up gets its tools served once it is up,
// without a restart. Sync blocks; run it in its own goroutine.
func (m *Manager) Sync(ctx context.Context, reg Registry) {
	t := time.NewTicker(m.opts.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.SyncOnce(ctx, reg)
	}
}

// SyncOnce is one round of Sync; it reports how many tools it added, changed and removed.
func (m *Manager) SyncOnce(ctx context.Context, reg Registry) (added, changed, removed int) {
	want := map[string]tools.Tool{}
	for _, t := range m.Tools(ctx) {
		want[t.Name] = t
	}
	if ctx.Err() != nil {
		return 0, 0, 0
	}
	have := map[string]tools.Tool{}
	for _, t := range reg.List() {
		if strings.HasPrefix(t.Source, "mcp:") {
			have[t.Name] = t
		}
	}
	for name, t := range want {
		old, ok := have[name]
		if ok && old.Description == t.Description && string(old.Parameters) == string(t.Parameters) && old.Idempotent == t.Idempotent {
			continue
		}
		if err := reg.Put(t); err != nil {
			m.opts.Log.Warn("mcp: register tool", "tool", name, "err", err)
			continue
		}
		if ok {
			changed++
		} else {
			added++
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok && reg.Remove(name) {
			removed++
		}
	}
	if added+changed+removed > 0 {
		m.opts.Log.Info("mcp tools refreshed", "added", added, "changed", changed, "removed", removed)
	}
	return added, changed, removed
}

// ServerStatus describes one server for operators (/status, logs).
type ServerStatus struct {
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	Tools     int    `json:"tools"`
	Error     string `json:"error,omitempty"`
}

// Status reports every server's state without connecting.
func (m *Manager) Status() []ServerStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ServerStatus
	for _, s := range m.servers {
		s.mu.Lock()
		st := ServerStatus{Name: s.name, Connected: s.session != nil, Tools: len(s.tools)}
		if s.lastErr != nil {
			st.Error = s.lastErr.Error()
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close ends every session (stdio servers are stopped).
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, s := range m.servers {
		s.mu.Lock()
		if s.session != nil {
			if err := s.session.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close MCP server %s: %w", s.name, err))
			}
			s.session = nil
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// ToolName builds mcp_{server}_{tool}: characters outside [a-zA-Z0-9_-] become "_", and a name
// longer than 64 characters is cut and given a short hash of the full name so it stays unique.
func ToolName(server, tool string) string {
	full := "mcp_" + sanitize(server) + "_" + sanitize(tool)
	if len(full) <= 64 {
		return full
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	return full[:55] + "_" + hex.EncodeToString(sum[:])[:8]
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// inputSchema turns the server's schema into an object schema the model accepts.
func inputSchema(v any) json.RawMessage {
	var m map[string]any
	if raw, err := json.Marshal(v); err == nil {
		_ = json.Unmarshal(raw, &m)
	}
	if m == nil {
		m = map[string]any{}
	}
	if _, ok := m["type"]; !ok {
		m["type"] = "object"
	}
	if m["type"] == "object" {
		if _, ok := m["properties"]; !ok {
			m["properties"] = map[string]any{}
		}
	}
	raw, _ := json.Marshal(m)
	return raw
}

func (m *Manager) wrap(s *server, t *mcp.Tool, used map[string]bool) tools.Tool {
	name := ToolName(s.name, t.Name)
	for i := 2; used[name]; i++ {
		name = ToolName(s.name, fmt.Sprintf("%s_%d", t.Name, i))
	}
	used[name] = true
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if desc == "" {
		desc = "MCP tool " + t.Name
	}
	desc = fmt.Sprintf("[MCP %s] %s", s.name, desc)
	idem := t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint)
	orig := t.Name
	return tools.Tool{
		Name: name, Description: desc, Parameters: inputSchema(t.InputSchema), Idempotent: idem,
		Source: "mcp:" + s.name,
		Execute: func(ctx context.Context, call tools.Call) (tools.Result, error) {
			return m.call(ctx, s, orig, call.Args), nil
		},
	}
}

// call runs one tool call. It never retries a call that reached the server (tools may not be
// idempotent); it reconnects first when the session is known to be gone.
func (m *Manager) call(ctx context.Context, s *server, tool string, args map[string]any) tools.Result {
	cs, err := m.ensure(ctx, s, false)
	if err != nil {
		return tools.ErrorResult("%s", strings.TrimPrefix(err.Error(), ErrUnavailable.Error()+": "))
	}
	cctx, cancel := context.WithTimeout(ctx, s.callTO)
	defer cancel()
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		var we *jsonrpc.Error
		if errors.As(err, &we) {
			// The server answered: the session is fine, the call was refused.
			return tools.ErrorResult("MCP tool %s on server %s failed: %s", tool, s.name, we.Message)
		}
		if cctx.Err() != nil && ctx.Err() == nil {
			return tools.ErrorResult("MCP tool %s on server %s timed out after %s", tool, s.name, s.callTO)
		}
		if ctx.Err() != nil {
			return tools.ErrorResult("MCP tool %s on server %s: %v", tool, s.name, ctx.Err())
		}
		s.drop(cs, err)
		return tools.ErrorResult("MCP server %s is unavailable: %v", s.name, err)
	}
	return convertResult(res)
}

func convertResult(res *mcp.CallToolResult) tools.Result {
	out := tools.Result{IsError: res.IsError}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			out.Content = append(out.Content, llm.Text(c.Text))
		case *mcp.ImageContent:
			out.Content = append(out.Content, llm.Image(base64.StdEncoding.EncodeToString(c.Data), c.MIMEType))
		case *mcp.AudioContent:
			out.Content = append(out.Content, llm.Text(fmt.Sprintf("[audio %s, %d bytes, not shown]", c.MIMEType, len(c.Data))))
		case *mcp.ResourceLink:
			out.Content = append(out.Content, llm.Text(fmt.Sprintf("[resource %s: %s]", c.Name, c.URI)))
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				out.Content = append(out.Content, llm.Text(c.Resource.Text))
			} else if c.Resource != nil {
				out.Content = append(out.Content, llm.Text(fmt.Sprintf("[resource %s %s, %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob))))
			}
		default:
			if raw, err := json.Marshal(c); err == nil {
				out.Content = append(out.Content, llm.Text(string(raw)))
			}
		}
	}
	if res.StructuredContent != nil {
		if raw, err := json.Marshal(res.StructuredContent); err == nil {
			out.Details = raw
			if len(out.Content) == 0 {
				out.Content = append(out.Content, llm.Text(string(raw)))
			}
		}
	}
	if out.Content == nil {
		out.Content = []llm.Content{}
	}
	return out
}
