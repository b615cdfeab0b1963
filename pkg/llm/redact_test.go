package llm

import (
	"context"
	"iter"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	const key = "sk-live-0123456789abcdef"
	tests := []struct {
		name    string
		in      string
		secrets []string
		want    string
		gone    []string // must not survive
	}{
		{"configured key", "401: invalid key " + key, []string{key}, "401: invalid key [REDACTED]", []string{key}},
		{"echoed authorization header", `{"error":"bad auth","headers":{"Authorization":"Bearer abcdefghijklmnop"}}`, nil, "", []string{"abcdefghijklmnop"}},
		{"bearer in text", "sent Authorization: Bearer tok_9f8e7d6c5b4a", nil, "sent Authorization: Bearer [REDACTED]", []string{"tok_9f8e7d6c5b4a"}},
		{"x-api-key header", "x-api-key: my-anthropic-key-123 rejected", nil, "x-api-key: [REDACTED] rejected", []string{"my-anthropic-key-123"}},
		{"x-goog-api-key", `"x-goog-api-key": "ZZZZsecretvalue"`, nil, "", []string{"ZZZZsecretvalue"}},
		{"api_key json", `{"api_key":"abcd1234efgh"}`, nil, "", []string{"abcd1234efgh"}},
		{"url key param", "GET https://example.invalid/v1/models?key=AIzaSyA-1234567890abcdefghijk&alt=sse failed", nil, "", []string{"AIzaSyA-1234567890abcdefghijk"}},
		{"openai key shape", "key sk-proj-AbCdEf0123456789 is revoked", nil, "key [REDACTED] is revoked", []string{"sk-proj-AbCdEf0123456789"}},
		{"anthropic key shape", "sk-ant-api03-xyzxyzxyzxyz", nil, "[REDACTED]", nil},
		{"github token", "ghp_abcdefghijklmnopqrstuvwxyz0123", nil, "[REDACTED]", nil},
		{"aws key", "AKIAABCDEFGHIJKLMNOP used", nil, "[REDACTED] used", nil},
		{"jwt", "token eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", nil, "", []string{"SflKxwRJSMeKKF2QT4"}},
		{"basic auth", "Authorization: Basic dXNlcjpwYXNzd29yZA==", nil, "Authorization: Basic [REDACTED]", []string{"dXNlcjpwYXNzd29yZA=="}},
		{"longest secret first", "k=abcdef-longer", []string{"abcdef", "abcdef-longer"}, "k=[REDACTED]", []string{"longer"}},
		{"short secret ignored", "error 500 abc", []string{"abc"}, "error 500 abc", nil},
		{"nothing to redact", "503 Service Unavailable: overloaded", []string{key}, "503 Service Unavailable: overloaded", nil},
		{"max_tokens kept", "max_tokens: 4096 exceeds the limit", nil, "max_tokens: 4096 exceeds the limit", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Redact(tt.in, tt.secrets...)
			if tt.want != "" && got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
			for _, g := range tt.gone {
				if strings.Contains(got, g) {
					t.Errorf("Redact(%q) = %q keeps %q", tt.in, got, g)
				}
			}
		})
	}
}

// TestStreamRedactsErrors: a provider whose error echoes the request's credentials reports an
// error message without them, whichever way the key reached it.
func TestStreamRedactsErrors(t *testing.T) {
	const api = "test-redact-echo"
	RegisterAPI(api, ProviderFunc(func(ctx context.Context, m *Model, c *Context, o *StreamOptions) iter.Seq[Event] {
		return func(yield func(Event) bool) {
			err := &echoError{"401 from upstream: Authorization: Bearer " + o.APIKey + " x-org: " + o.Headers["X-Org"] + " other " + strings.Join(o.Secrets, ",")}
			yield(ErrorEvent(m, nil, StopReasonError, err))
		}
	}))
	t.Cleanup(func() { UnregisterAPI(api) })
	model := &Model{ID: "m", API: api, Provider: "p", Headers: map[string]string{"X-Model": "model-header-secret"}}
	opts := &StreamOptions{APIKey: "plainkeyvalue1", Headers: map[string]string{"X-Org": "org-secret-42"}, Secrets: []string{"another-configured-secret"}}
	final := Complete(context.Background(), model, &Context{}, opts)
	if final.StopReason != StopReasonError {
		t.Fatalf("stop = %s", final.StopReason)
	}
	for _, s := range []string{"plainkeyvalue1", "org-secret-42", "another-configured-secret"} {
		if strings.Contains(final.ErrorMessage, s) {
			t.Errorf("error message %q keeps %q", final.ErrorMessage, s)
		}
	}
	if !strings.Contains(final.ErrorMessage, "401 from upstream") {
		t.Errorf("error message lost its meaning: %q", final.ErrorMessage)
	}
}

type echoError struct{ s string }

func (e *echoError) Error() string { return e.s }
