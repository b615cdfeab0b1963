package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/tools"
)

// The test binary doubles as a stdio MCP server when this variable is set.
const stdioEnv = "MCPCLIENT_TEST_STDIO_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(stdioEnv) == "1" {
		if err := newTestServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type addIn struct {
	A int `json:"a" jsonschema:"first addend"`
	B int `json:"b" jsonschema:"second addend"`
}
type addOut struct {
	Sum int `json:"sum"`
}

// newTestServer is a real MCP server built with the same SDK.
func newTestServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "calc", Version: "0.1.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d", in.A+in.B)}}}, addOut{Sum: in.A + in.B}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail.always", Description: "Always fails"},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("the disk is on fire")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pixel", Description: "Returns an image"},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: []byte("PNG"), MIMEType: "image/png"}}}, nil, nil
		})
	return s
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func byName(ts []tools.Tool) map[string]tools.Tool {
	m := map[string]tools.Tool{}
	for _, t := range ts {
		m[t.Name] = t
	}
	return m
}

// roundTrip lists and calls the test server's tools through m.
func roundTrip(t *testing.T, m *Manager, server string) {
	t.Helper()
	ctx := context.Background()
	ts := byName(m.Tools(ctx))
	add, ok := ts["mcp_"+server+"_add"]
	if !ok || len(ts) != 3 {
		t.Fatalf("tools = %v, status %+v", ts, m.Status())
	}
	if _, ok := ts["mcp_"+server+"_fail_always"]; !ok {
		t.Fatalf("sanitized name missing: %v", ts)
	}
	if !strings.Contains(add.Description, "Add two integers") || !add.Idempotent || add.Source != "mcp:"+server {
		t.Errorf("add = %+v", add)
	}
	var schema struct {
		Type       string                    `json:"type"`
		Properties map[string]map[string]any `json:"properties"`
		Required   []string                  `json:"required"`
	}
	if err := json.Unmarshal(add.Parameters, &schema); err != nil || schema.Type != "object" || schema.Properties["a"]["type"] != "integer" || len(schema.Required) != 2 {
		t.Errorf("schema %s (%v)", add.Parameters, err)
	}
	r := add.Run(ctx, tools.Call{Args: map[string]any{"a": 2, "b": 3}})
	if r.IsError || r.Text() != "5" || string(r.Details) != `{"sum":5}` {
		t.Errorf("add result %+v %s", r, r.Details)
	}
	r = ts["mcp_"+server+"_fail_always"].Run(ctx, tools.Call{})
	if !r.IsError || !strings.Contains(r.Text(), "the disk is on fire") {
		t.Errorf("failing tool: %+v", r)
	}
	r = add.Run(ctx, tools.Call{Args: map[string]any{"a": "two"}})
	if !r.IsError {
		t.Errorf("bad arguments accepted: %+v", r)
	}
	r = ts["mcp_"+server+"_pixel"].Run(ctx, tools.Call{})
	if len(r.Content) != 1 || r.Content[0].Type != "image" || r.Content[0].Data != "UE5H" || r.Content[0].MimeType != "image/png" {
		t.Errorf("image: %+v", r.Content)
	}
}

func TestStreamableHTTPRoundTrip(t *testing.T) {
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newTestServer() }, nil))
	defer srv.Close()
	m, err := New(map[string]config.MCPServer{"calc": {URL: srv.URL}}, Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	roundTrip(t, m, "calc")
	if st := m.Status(); len(st) != 1 || !st[0].Connected || st[0].Tools != 3 {
		t.Errorf("status %+v", st)
	}
}

func TestSSERoundTrip(t *testing.T) {
	srv := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return newTestServer() }, nil))
	defer srv.Close()
	m, err := New(map[string]config.MCPServer{"legacy": {Transport: "sse", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer x"}}}, Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	roundTrip(t, m, "legacy")
}

func TestStdioRoundTrip(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(map[string]config.MCPServer{"local": {Command: exe, Args: []string{"-test.run=^$"}, Env: map[string]string{stdioEnv: "1"}}}, Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	roundTrip(t, m, "local")
}

func TestInMemoryAndReconnect(t *testing.T) {
	var attempts atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	now := time.Unix(1000, 0)
	var serverSession atomic.Pointer[mcp.ServerSession]
	m, _ := New(nil, Options{Log: quiet(), RetryInterval: time.Minute, Now: func() time.Time { return now }})
	m.AddServer("mem", func() (mcp.Transport, error) {
		attempts.Add(1)
		if fail.Load() {
			return nil, errors.New("connection refused")
		}
		ct, st := mcp.NewInMemoryTransports()
		ss, err := newTestServer().Connect(context.Background(), st, nil)
		if err != nil {
			return nil, err
		}
		serverSession.Store(ss)
		return ct, nil
	}, 0)
	defer m.Close()
	ctx := context.Background()
	if ts := m.Tools(ctx); len(ts) != 0 {
		t.Fatalf("down server listed tools: %v", ts)
	}
	if st := m.Status(); st[0].Connected || !strings.Contains(st[0].Error, "MCP server mem is unavailable: connection refused") {
		t.Fatalf("status %+v", st)
	}
	m.Tools(ctx)
	if attempts.Load() != 1 {
		t.Fatalf("retried within RetryInterval: %d attempts", attempts.Load())
	}
	fail.Store(false)
	now = now.Add(2 * time.Minute)
	ts := byName(m.Tools(ctx))
	if len(ts) != 3 {
		t.Fatalf("after recovery: %v", ts)
	}
	add := ts["mcp_mem_add"]
	if r := add.Run(ctx, tools.Call{Args: map[string]any{"a": 1, "b": 1}}); r.Text() != "2" {
		t.Fatalf("%+v", r)
	}
	// The server goes away: the known tool now answers with a clear error, no panic.
	fail.Store(true)
	serverSession.Load().Close()
	var r tools.Result
	testwait.Eventually(t, 0, func() error {
		r = add.Run(ctx, tools.Call{Args: map[string]any{"a": 1, "b": 1}})
		return testwait.Want(r.IsError, "the tool still answers after the server went away: %+v", r)
	})
	if !r.IsError || !strings.Contains(r.Text(), "MCP server mem is unavailable") {
		t.Fatalf("after server loss: %+v", r)
	}
	if ts := m.Tools(ctx); len(ts) != 3 {
		t.Fatalf("last known tools should stay listed while down: %d", len(ts))
	}
	// It comes back: the next turn after RetryInterval reconnects.
	fail.Store(false)
	now = now.Add(2 * time.Minute)
	m.Tools(ctx)
	if r := add.Run(ctx, tools.Call{Args: map[string]any{"a": 20, "b": 22}}); r.IsError || r.Text() != "42" {
		t.Fatalf("after reconnect: %+v", r)
	}
}

func TestDownServers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/mcp"
	l.Close()
	exe, _ := os.Executable()
	m, err := New(map[string]config.MCPServer{
		"gone":     {URL: dead, TimeoutMs: 2000},
		"gone_sse": {Transport: "sse", URL: dead, TimeoutMs: 2000},
		"nocmd":    {Command: "/nonexistent/mcp-server"},
		"crash":    {Command: exe, Args: []string{"-test.run=^$"}, TimeoutMs: 2000}, // exits at once: not a server
		"off":      {URL: dead, Disabled: true},
	}, Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if ts := m.Tools(context.Background()); len(ts) != 0 {
		t.Fatalf("tools from dead servers: %v", ts)
	}
	st := m.Status()
	if len(st) != 4 {
		t.Fatalf("status %+v", st)
	}
	for _, s := range st {
		if s.Connected || !strings.Contains(s.Error, "MCP server "+s.Name+" is unavailable") {
			t.Errorf("%+v", s)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	cases := map[string]config.MCPServer{
		"empty":         {},
		"stdio no cmd":  {Transport: "stdio", URL: "http://x"},
		"sse no url":    {Transport: "sse"},
		"bad transport": {Transport: "websocket", URL: "ws://x"},
	}
	for name, c := range cases {
		_, err := New(map[string]config.MCPServer{"srv": c}, Options{Log: quiet()})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "ai.mcpServers.srv") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestToolName(t *testing.T) {
	cases := []struct{ server, tool, want string }{
		{"github", "create_issue", "mcp_github_create_issue"},
		{"my server", "do.thing/now", "mcp_my_server_do_thing_now"},
		{"中文", "工具", "mcp______"},
	}
	for _, c := range cases {
		if got := ToolName(c.server, c.tool); got != c.want {
			t.Errorf("ToolName(%q, %q) = %q", c.server, c.tool, got)
		}
	}
	long1 := ToolName("server", strings.Repeat("x", 80)+"a")
	long2 := ToolName("server", strings.Repeat("x", 80)+"b")
	if len(long1) != 64 || long1 == long2 || !tools.ValidName(long1) {
		t.Errorf("long names %q %q", long1, long2)
	}
}

func TestToolListChangedRelists(t *testing.T) {
	srv := newTestServer()
	m, _ := New(nil, Options{Log: quiet()})
	m.AddServer("live", func() (mcp.Transport, error) {
		ct, st := mcp.NewInMemoryTransports()
		if _, err := srv.Connect(context.Background(), st, nil); err != nil {
			return nil, err
		}
		return ct, nil
	}, 0)
	defer m.Close()
	ctx := context.Background()
	if n := len(m.Tools(ctx)); n != 3 {
		t.Fatalf("%d tools", n)
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "late", Description: "Added later"},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "here"}}}, nil, nil
		})
	var ts map[string]tools.Tool
	testwait.Eventually(t, 0, func() error {
		ts = byName(m.Tools(ctx))
		return testwait.Want(len(ts) == 4, "tool list change not picked up: %d tools", len(ts))
	})
	if r := ts["mcp_live_late"].Run(ctx, tools.Call{}); r.Text() != "here" {
		t.Fatalf("%+v", r)
	}
}
