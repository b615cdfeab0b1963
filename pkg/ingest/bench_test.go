package ingest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// fakeJS acks every publish without a server, so the benchmarks measure ingest's own work.
type fakeJS struct{ seq atomic.Uint64 }

func (f *fakeJS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return &jetstream.PubAck{Stream: "S", Sequence: f.seq.Add(1)}, nil
}

// BenchmarkWebhook is one POST /webhook/{bot} as `agentbus bench` sends it (a private message
// that starts a turn): signature check, parse, normalize, dispatch, the SESSION_IN publish (issue 40: no IM_IN copy),
// response. The publishes are acked by a fake, so this is ingest's CPU alone.
func BenchmarkWebhook(b *testing.B) {
	wh := WebhookOptions{Secrets: map[string]string{"bench": secret}}
	wh.PerBot.PerSecond, wh.PerSender.PerSecond = -1, -1
	in := New(&fakeJS{}, Options{Bots: map[string]BotRoles{"webhook/bench": {}}})
	mux := http.NewServeMux()
	NewWebhookHandler(in, wh, nil).Routes(mux)
	bodies := make([][]byte, 64)
	sigs := make([]string, len(bodies))
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"id":"m-%d","scene":{"type":"private","id":"u-%d"},"sender":{"id":"u-%d","name":"Bench User %d"},"content":[{"type":"text","data":{"text":"please call bench_echo with this text: hello number %d"}}],"time":%d}`, i, i, i, i, i, time.Now().UnixMilli())
		sigs[i] = webhook.Sign(secret, bodies[i])
	}
	b.ReportAllocs()
	i := 0
	cpu := cputime.Process()
	for b.Loop() {
		i++
		k := i % len(bodies)
		req := httptest.NewRequest(http.MethodPost, "/webhook/bench", bytes.NewReader(bodies[k]))
		req.Header.Set(webhook.SignatureHeader, sigs[k])
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		if w.Code != http.StatusAccepted {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	cputime.Report(b, cpu)
}
