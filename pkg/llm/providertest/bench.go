package providertest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
)

// memTransport answers every request with a recorded body from memory, so a benchmark measures
// the provider's request building and stream parsing, not sockets.
type memTransport struct {
	body        []byte
	contentType string
}

func (m memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {m.contentType}},
		Body:    io.NopCloser(bytes.NewReader(m.body)),
		Request: req, ContentLength: int64(len(m.body)),
	}, nil
}

// RepeatEvent returns body with the first event (see SplitEvents) that contains marker
// repeated n times in place: a long recorded stream made from a short one.
func RepeatEvent(body []byte, marker string, n int) []byte {
	var out bytes.Buffer
	done := false
	for _, ev := range SplitEvents(body) {
		if !done && bytes.Contains(ev, []byte(marker)) {
			for range n {
				out.Write(ev)
			}
			done = true
			continue
		}
		out.Write(ev)
	}
	return out.Bytes()
}

// BenchStream streams body (a recorded response) through p b.N times and reports the
// throughput in MB/s of stream (b.SetBytes), and ns and heap allocations per delta event
// (text, thinking or tool-call delta). model gets a base URL; the body is served from memory.
func BenchStream(b *testing.B, p llm.Provider, model func(baseURL string) *llm.Model, body []byte, contentType string, c *llm.Context) {
	b.Helper()
	m := model("http://bench.invalid/v1")
	opts := &llm.StreamOptions{APIKey: TestKey, HTTPClient: &http.Client{Transport: memTransport{body, contentType}}}
	if c == nil {
		c = question("Hello")
	}
	count := func() (deltas int, final *llm.Message) {
		for ev := range p.Stream(context.Background(), m, c, opts) {
			switch ev.Type {
			case llm.EventTextDelta, llm.EventThinkingDelta, llm.EventToolCallDelta:
				deltas++
			case llm.EventDone, llm.EventError:
				final = ev.Message
			}
		}
		return deltas, final
	}
	deltas, final := count()
	if final == nil || final.StopReason == llm.StopReasonError || deltas == 0 {
		b.Fatalf("stream failed: %d deltas, final %+v", deltas, final)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		count()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	n := float64(b.N) * float64(deltas)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/delta")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/delta")
	b.ReportMetric(float64(deltas), "deltas/op")
}
