package retry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fast keeps backoff waits tiny so tests take milliseconds.
var fast = Policy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond, Logger: quiet}

type step struct {
	status int
	header map[string]string
	body   string
}

// server answers with steps in order (the last one repeats) and records the bodies it got.
func server(t *testing.T, steps []step) (*httptest.Server, *atomic.Int32, *[]string) {
	t.Helper()
	var n atomic.Int32
	var (
		mu     sync.Mutex
		bodies []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		i := int(n.Add(1)) - 1
		if i >= len(steps) {
			i = len(steps) - 1
		}
		s := steps[i]
		for k, v := range s.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(s.status)
		_, _ = io.WriteString(w, s.body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n, &bodies
}

func post(t *testing.T, ctx context.Context, p Policy, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = nil // force Do to buffer the body itself
	return Do(ctx, p, req, http.DefaultClient.Do)
}

func TestDo(t *testing.T) {
	tests := []struct {
		name      string
		steps     []step
		policy    Policy
		wantCalls int32
		wantErr   string // substring; "" = success
		wantIs    error
	}{
		{name: "ok first try", steps: []step{{status: 200, body: "ok"}}, policy: fast, wantCalls: 1},
		{name: "429 then ok honours Retry-After 0",
			steps:  []step{{status: 429, header: map[string]string{"Retry-After": "0"}, body: `{"error":{"message":"slow down"}}`}, {status: 200}},
			policy: fast, wantCalls: 2},
		{name: "503 twice then ok with backoff",
			steps:  []step{{status: 503}, {status: 502}, {status: 200}},
			policy: fast, wantCalls: 3},
		{name: "retry-after-ms",
			steps:  []step{{status: 429, header: map[string]string{"retry-after-ms": "1.5"}}, {status: 200}},
			policy: fast, wantCalls: 2},
		{name: "attempts exhausted quote server message",
			steps:  []step{{status: 500, body: `{"error":{"message":"upstream exploded","type":"server_error"}}`}},
			policy: fast, wantCalls: 3, wantErr: "HTTP 500 Internal Server Error: upstream exploded (after 3 attempts)"},
		{name: "401 not retried",
			steps:  []step{{status: 401, body: `{"error":{"message":"Incorrect API key provided"}}`}},
			policy: fast, wantCalls: 1, wantErr: "HTTP 401 Unauthorized: Incorrect API key provided"},
		{name: "400 plain text body",
			steps:  []step{{status: 400, body: "bad things\n"}},
			policy: fast, wantCalls: 1, wantErr: "HTTP 400 Bad Request: bad things"},
		{name: "ollama error shape",
			steps:  []step{{status: 404, body: `{"error":"model 'x' not found"}`}},
			policy: fast, wantCalls: 1, wantErr: "model 'x' not found"},
		{name: "Retry-After above cap gives up at once",
			steps:  []step{{status: 429, header: map[string]string{"Retry-After": "120"}, body: `{"error":{"message":"quota"}}`}},
			policy: Policy{MaxAttempts: 5, MaxDelay: time.Second, Logger: quiet}, wantCalls: 1,
			wantErr: "server asked to retry after 2m0s, more than the 1s limit", wantIs: ErrRetryAfterTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, calls, bodies := server(t, tt.steps)
			resp, err := post(t, context.Background(), tt.policy, srv.URL)
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("calls = %d, want %d", got, tt.wantCalls)
			}
			for i, b := range *bodies {
				if b != `{"x":1}` {
					t.Errorf("attempt %d body = %q, want the original body replayed", i+1, b)
				}
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				resp.Body.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			var herr *HTTPError
			if !errors.As(err, &herr) {
				t.Fatalf("err %T is not an *HTTPError", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("errors.Is(err, %v) = false", tt.wantIs)
			}
		})
	}
}

func TestDoConnectionErrorRetried(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	url := srv.URL
	srv.Close() // nothing listens any more: every attempt is refused
	_, err := post(t, context.Background(), fast, url)
	if err == nil || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err = %v, want a connection error after 3 attempts", err)
	}
}

func TestDoContextCancelledDuringWait(t *testing.T) {
	srv, calls, _ := server(t, []step{{status: 503, header: map[string]string{"Retry-After": "30"}}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }() // cancel while the 30 s Retry-After is being waited out
	_, err := post(t, ctx, Policy{MaxAttempts: 3, MaxDelay: time.Minute, Logger: quiet}, srv.URL)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if calls.Load() != 1 {
		t.Errorf("calls = %d, want 1", calls.Load())
	}
}

func TestTransport(t *testing.T) {
	srv, calls, _ := server(t, []step{{status: 429, header: map[string]string{"Retry-After": "0"}}, {status: 200, body: "fine"}})
	c := &http.Client{Transport: &Transport{Policy: fast}}
	resp, err := c.Post(srv.URL, "application/json", strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "fine" || calls.Load() != 2 {
		t.Fatalf("body %q after %d calls", b, calls.Load())
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		h      map[string]string
		want   time.Duration
		wantOK bool
	}{
		{map[string]string{"Retry-After": "2"}, 2 * time.Second, true},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond, true},
		{map[string]string{"retry-after-ms": "250", "Retry-After": "9"}, 250 * time.Millisecond, true},
		{map[string]string{"Retry-After": now.Add(3 * time.Second).Format(http.TimeFormat)}, 3 * time.Second, true},
		{map[string]string{"Retry-After": "soon"}, 0, false},
		{map[string]string{}, 0, false},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.h {
			h.Set(k, v)
		}
		got, ok := ParseRetryAfter(h, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%v) = %v, %v; want %v, %v", tt.h, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestTransportKeepsIdleConnections: a Transport without a Base reuses the connections of a
// wave of concurrent calls for the next wave, where net/http's default transport keeps only 2
// per host and would dial wave-2 new ones.
func TestTransportKeepsIdleConnections(t *testing.T) {
	const wave = 16
	var (
		mu      sync.Mutex
		dialed  int
		arrived = make(chan struct{}, wave)
		release = make(chan struct{})
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		wait := release
		mu.Unlock()
		arrived <- struct{}{}
		<-wait // hold every call of the wave open at once, so the wave needs wave connections
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			dialed++
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	client := &http.Client{Transport: &Transport{}}
	run := func() int {
		mu.Lock()
		before := dialed
		release = make(chan struct{})
		wait := release
		mu.Unlock()
		var wg sync.WaitGroup
		for i := 0; i < wave; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}()
		}
		for i := 0; i < wave; i++ {
			<-arrived
		}
		close(wait)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return dialed - before
	}
	if n := run(); n != wave {
		t.Fatalf("first wave dialed %d connections, want %d", n, wave)
	}
	// A connection goes back to the pool just after its body's EOF, so a call of the next wave
	// can rarely race it and dial; the default transport would dial wave-2 = 14.
	if n := run(); n > wave/4 {
		t.Errorf("second wave dialed %d new connections, want about 0 (idle ones reused)", n)
	}
}
