package ingest

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// concurrentPosts sends one signed message from each of n chats at the same moment (every
// request waits at a barrier on its own connection) and returns the status codes by count.
func concurrentPosts(t *testing.T, url string, n int) map[int]int {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	now := time.Now()
	reqs := make([]*http.Request, n)
	for i := range reqs {
		b := body(fmt.Sprintf("c%d", i), fmt.Sprintf("chat%d", i), now)
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, b))
		reqs[i] = req
	}
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for _, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code := -1 // transport error
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return codes
}

// TestWebhookConcurrentChats (issue 37): 200 chats posting one message each at the same moment
// are all accepted on the default configuration; before, a limit of 16 requests in flight
// answered 503 to most of them. The accepted share is printed.
func TestWebhookConcurrentChats(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	srv, _ := serveWebhook(t, ns, WebhookOptions{})
	const n = 200
	codes := concurrentPosts(t, srv.URL+"/webhook/b1", n)
	t.Logf("%d concurrent webhook senders: accepted %d (%.1f %%), codes %v", n, codes[http.StatusAccepted],
		100*float64(codes[http.StatusAccepted])/n, codes)
	if codes[http.StatusAccepted] != n {
		t.Fatalf("accepted %d of %d concurrent messages (codes %v), want all", codes[http.StatusAccepted], n, codes)
	}
	if got := inboundMsgs(t, ns.JS); got != n {
		t.Errorf("the bus holds %d inbound messages, want %d", got, n)
	}
}

// TestWebhookFloodOfLargeBodies: the bytes in flight stay bounded. Large bodies that are still
// being sent hold their reservation (their Content-Length); once they fill
// im.webhook.maxInFlightBytes, a further large body is refused 503 + Retry-After at once, without
// being read, and logged once however many are refused; a small message still fits and is
// accepted, and so are the large bodies once they arrive whole. A body of unknown length
// (chunked) is bounded as it grows.
func TestWebhookFloodOfLargeBodies(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	const big = 300 << 10 // a text the bus carries (under max_payload with its inbox event)
	var logs lockedBuf
	// Room for four large requests in flight and a small one, not for a fifth large one.
	srv, h := serveWebhook(t, ns, WebhookOptions{MaxBodyBytes: 2 * big, MaxInFlightBytes: 4*big + 128<<10})
	h.log = slog.New(slog.NewJSONHandler(&logs, nil))
	url := srv.URL + "/webhook/b1"
	now := time.Now()
	bigBody := func(id string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"scene":{"type":"private","id":%q},"sender":{"id":%q},"content":[{"type":"text","data":{"text":"%s"}}],"time":%d}`,
			id, id, id, strings.Repeat("x", big), now.UnixMilli())
	}
	// Four large bodies, each sent but for its last byte: the server holds them in flight.
	type slow struct {
		w    *io.PipeWriter
		rest []byte
		done chan int
	}
	var held []slow
	for i := range 4 {
		b := bigBody(fmt.Sprintf("big%d", i))
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
		req, err := http.NewRequest(http.MethodPost, url, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(b))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, b))
		s := slow{w: pw, rest: b[len(b)-1:], done: make(chan int, 1)}
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				s.done <- -1
				return
			}
			resp.Body.Close()
			s.done <- resp.StatusCode
		}()
		if _, err := pw.Write(b[:len(b)-1]); err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	testwait.Eventually(t, 0, func() error {
		if n, bytes := h.flight.load(); n != 4 || bytes < 4*big {
			return fmt.Errorf("%d requests, %d bytes in flight, want the 4 large ones", n, bytes)
		}
		return nil
	})
	for i := range 5 {
		b := bigBody(fmt.Sprintf("flood%d", i))
		got := send(t, url, legacy(b), b)
		if got.code != http.StatusServiceUnavailable || got.retryAfter == "" {
			t.Fatalf("large body %d while 4 are in flight: %d %q Retry-After %q, want 503 with Retry-After", i, got.code, got.body, got.retryAfter)
		}
	}
	if b := body("small", "u9", now); send(t, url, legacy(b), b).code != http.StatusAccepted {
		t.Fatal("a small message was refused while large bodies filled most of the bytes in flight")
	}
	for i, s := range held {
		if _, err := s.w.Write(s.rest); err != nil {
			t.Fatal(err)
		}
		s.w.Close()
		if code := <-s.done; code != http.StatusAccepted {
			t.Fatalf("held large body %d: %d, want 202", i, code)
		}
	}
	if n, bytes := h.flight.load(); n != 0 || bytes != 0 {
		t.Errorf("after the requests: %d requests, %d bytes still counted in flight", n, bytes)
	}
	if n := strings.Count(logs.String(), "webhook refused: too many requests at once"); n != 1 {
		t.Errorf("%d log lines for 5 refusals within a second, want 1:\n%s", n, logs.String())
	}

	// Chunked (no Content-Length): bounded while it grows, and still accepted when it fits.
	b := bigBody("chunked")
	req, err := http.NewRequest(http.MethodPost, url, io.MultiReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("chunked large body: %d, want 202", resp.StatusCode)
	}
}
