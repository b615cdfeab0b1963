package models

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vendorServer serves the listing endpoints of every supported api from testdata, checking
// the credentials each api expects.
func vendorServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/models" && r.Header.Get("anthropic-version") != "":
			if r.Header.Get("x-api-key") != "ak" {
				http.Error(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, 401)
				return
			}
			w.Write(fixture(t, "anthropic_models.json"))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
			if r.Header.Get("Authorization") != "Bearer sk-test" {
				w.WriteHeader(401)
				w.Write([]byte(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`))
				return
			}
			w.Write(fixture(t, "openai_models.json"))
		case r.Method == http.MethodGet && r.URL.Path == "/router/v1/models":
			w.Write(fixture(t, "router_models.json"))
		case r.Method == http.MethodGet && r.URL.Path == "/v1beta/models":
			if r.Header.Get("x-goog-api-key") != "gk" {
				w.WriteHeader(403)
				return
			}
			w.Write(fixture(t, "google_models.json"))
		case r.Method == http.MethodGet && r.URL.Path == "/api/tags":
			w.Write(fixture(t, "ollama_tags.json"))
		case r.Method == http.MethodPost && r.URL.Path == "/api/show":
			var req struct{ Model string }
			json.NewDecoder(r.Body).Decode(&req)
			switch req.Model {
			case "qwen3:14b":
				w.Write(fixture(t, "ollama_show_qwen3.json"))
			case "llava:7b":
				w.Write(fixture(t, "ollama_show_llava.json"))
			default:
				w.WriteHeader(404)
				w.Write([]byte(`{"error":"model not found"}`))
			}
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDiscover(t *testing.T) {
	srv := vendorServer(t)
	type want struct {
		id        string
		vision    bool
		reasoning bool
		ctx       int
	}
	tests := []struct {
		name string
		p    config.Provider
		want []want
	}{
		{"openai drops non-chat models", config.Provider{API: llm.APIOpenAICompletions, BaseURL: srv.URL + "/v1", APIKey: "sk-test"},
			[]want{{"gpt-4o-mini", true, false, 0}, {"gpt-4o", true, false, 0}, {"o3", true, true, 0}}},
		{"router extensions", config.Provider{API: llm.APIOpenAIResponses, BaseURL: srv.URL + "/router/v1/"},
			[]want{{"cu/claude-4.5-sonnet", true, true, 200000}, {"ds/deepseek-chat", false, false, 65536}, {"local/qwen2.5-7b-instruct", false, false, 32768}}},
		{"ollama tags and show", config.Provider{API: llm.APIOllamaChat, Host: srv.URL},
			[]want{{"qwen3:14b", false, true, 40960}, {"llava:7b", true, false, 32768}, {"mystery:latest", false, false, 0}}},
		{"anthropic", config.Provider{API: llm.APIAnthropicMessages, BaseURL: srv.URL + "/v1", APIKey: "ak"},
			[]want{{"claude-sonnet-4-5-20250929", true, true, 0}, {"claude-haiku-4-5-20251001", true, false, 0}}},
		{"google keeps generateContent chat models", config.Provider{API: llm.APIGoogleGenerative, BaseURL: srv.URL, APIKey: "gk"},
			[]want{{"gemini-2.5-pro", true, true, 1048576}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := Discover(context.Background(), "alias", tt.p, DiscoverOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != len(tt.want) {
				t.Fatalf("got %d models %v, want %d", len(ms), ids(ms), len(tt.want))
			}
			for i, w := range tt.want {
				m := ms[i]
				if m.ID != w.id || m.SupportsImages() != w.vision || m.Reasoning != w.reasoning || m.ContextWindow != w.ctx {
					t.Errorf("model %d = %s vision=%v reasoning=%v ctx=%d, want %+v", i, m.ID, m.SupportsImages(), m.Reasoning, m.ContextWindow, w)
				}
				if m.API != tt.p.API || m.Provider != "alias" || m.Name == "" {
					t.Errorf("model %s: api %q provider %q name %q", m.ID, m.API, m.Provider, m.Name)
				}
			}
		})
	}
}

func TestDiscoverErrors(t *testing.T) {
	srv := vendorServer(t)
	tests := []struct {
		name    string
		p       config.Provider
		opts    DiscoverOptions
		wantErr error
		want    string
	}{
		{"bad key", config.Provider{API: llm.APIOpenAICompletions, BaseURL: srv.URL + "/v1", APIKey: "sk-wrong"}, DiscoverOptions{}, ErrDiscovery, "HTTP 401"},
		{"key option wins over config", config.Provider{API: llm.APIOpenAICompletions, BaseURL: srv.URL + "/v1", APIKey: "sk-test"}, DiscoverOptions{APIKey: "sk-other"}, ErrDiscovery, "Incorrect API key"},
		{"unsupported api", config.Provider{API: llm.APIFaux}, DiscoverOptions{}, ErrUnsupportedAPI, "faux"},
		{"connection refused", config.Provider{API: llm.APIOllamaChat, Host: "http://127.0.0.1:1"}, DiscoverOptions{}, ErrDiscovery, "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Discover(context.Background(), "a", tt.p, tt.opts)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.want)
			}
			if strings.Contains(err.Error(), "sk-") {
				t.Fatalf("error leaks the key: %v", err)
			}
		})
	}
}

func TestInferCapabilities(t *testing.T) {
	tests := []struct {
		id                string
		vision, reasoning bool
	}{
		{"gpt-4o", true, false},
		{"o3-mini", true, true},
		{"openai/o4-mini", true, true},
		{"deepseek-r1:14b", false, true},
		{"qwen2.5vl:7b", true, false},
		{"Qwen/Qwen2.5-VL-72B-Instruct", true, false},
		{"llama3.1:8b", false, false},
		{"gemma3:12b", true, false},
		{"glm-4v-flash", true, false},
		{"foo-o3x", false, false},
	}
	for _, tt := range tests {
		m := InferCapabilities(tt.id)
		if m.SupportsImages() != tt.vision || m.Reasoning != tt.reasoning {
			t.Errorf("%s: vision=%v reasoning=%v, want %v %v", tt.id, m.SupportsImages(), m.Reasoning, tt.vision, tt.reasoning)
		}
	}
}

func ids(ms []llm.Model) []string {
	out := make([]string, len(ms))
	for i := range ms {
		out[i] = ms[i].ID
	}
	return out
}
