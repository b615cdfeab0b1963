package egress

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// A delivery's first callback POST is part of its send span (the callback's traceparent names
// it, the status code is on it); a retried POST is a client span of its own under it.
func TestSendSpanAndRetriedPOST(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int // the callback's answers, in order
		posts    int   // POST spans expected
	}{
		{"first attempt answered", []int{200}, 0},
		{"one retry", []int{503, 200}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := natstest.New(t)
			cb := newCallback(t, func(n int) (int, http.Header, string) {
				if n <= len(tt.statuses) {
					return tt.statuses[n-1], nil, ""
				}
				return 200, nil, ""
			})
			exp := tracetest.NewInMemoryExporter()
			tp, err := tracing.NewWithExporter(context.Background(), "egress", exp)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			o := fastOptions(srv, testConfig(cb), t)
			o.Tracer = tp
			start(t, o)
			publish(t, srv.JS, outbound("turnS-0"), "")

			var send, posts []string // span ids; POST parents
			testwait.Eventually(t, 0, func() error {
				send, posts = nil, nil
				for _, s := range exp.GetSpans() {
					switch {
					case strings.HasPrefix(s.Name, "send "):
						send = append(send, s.SpanContext.SpanID().String())
						if got := attr(s.Attributes, "http.response.status_code"); got != "200" && tt.posts == 0 {
							t.Errorf("send span status code %q, want the callback's 200", got)
						}
					case s.Name == "POST":
						posts = append(posts, s.Parent.SpanID().String())
					}
				}
				return testwait.Want(len(send) > 0, "no send span among %d exported", len(exp.GetSpans()))
			})
			if len(send) != 1 || len(posts) != tt.posts {
				t.Fatalf("%d send and %d POST spans, want 1 and %d", len(send), len(posts), tt.posts)
			}
			for _, p := range posts {
				if p != send[0] {
					t.Errorf("POST span's parent %s, want the send span %s", p, send[0])
				}
			}
			// The first POST carried the send span's context to the callback.
			if tp := cb.get(0).header.Get("traceparent"); !strings.Contains(tp, "-"+send[0]+"-") {
				t.Errorf("first callback traceparent %q, want the send span %s", tp, send[0])
			}
		})
	}
}

// attr is the value of key among kvs, as text ("" when absent).
func attr(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
