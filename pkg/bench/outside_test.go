package bench

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRelayShape runs the relay of the outside bench in this process against the bench's
// model server and load generator: every plain and tool message is answered through the
// callback, a tool turn makes two model calls around a real read of the workspace file, and
// a request with a wrong signature is refused.
func TestRelayShape(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, outsideFile), []byte("file says hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	model, err := startModelServer()
	if err != nil {
		t.Fatal(err)
	}
	defer model.close()
	const secret = "s3cret-for-the-relay"
	lg, err := newLoadGen(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.close()
	// Record the replies' bodies as well as their arrival.
	var mu sync.Mutex
	var bodies []string
	inner := lg.cbSrv.Handler
	lg.cbSrv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		inner.ServeHTTP(w, r)
	})
	r := newRelay(secret, lg.cbURL, model.url, ws)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhook/{bot}", r.serve)
	srv := &http.Server{Handler: mux}
	ln, url := listenLoopback(t)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, shape := range []string{"plain", "tool"} {
		model.tool.Store(shape == "tool")
		calls := model.calls.Load()
		st := lg.phase(ctx, url, "t-"+shape+"-", 3, 4, 0, shape)
		if len(st.lat) != 12 || st.lost != 0 {
			t.Fatalf("%s: %d replies, %d lost, want 12 and 0", shape, len(st.lat), st.lost)
		}
		want := int64(12)
		if shape == "tool" {
			want = 24
		}
		if got := model.calls.Load() - calls; got != want {
			t.Errorf("%s: %d model calls, want %d", shape, got, want)
		}
	}
	r.wg.Wait()
	mu.Lock()
	joined := strings.Join(bodies, "\n")
	mu.Unlock()
	if !strings.Contains(joined, "the answer.") || strings.Contains(joined, "error:") {
		t.Errorf("replies do not carry the model's answer: %.300s", joined)
	}

	lg2, err := newLoadGen("another secret")
	if err != nil {
		t.Fatal(err)
	}
	defer lg2.close()
	if err := lg2.post(ctx, url, "bad-1", "bad", 0, "hello"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrongly signed POST: err = %v, want status 401", err)
	}
}

// TestProcCPU reads this process's CPU time from /proc and sees it grow with work.
func TestProcCPU(t *testing.T) {
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := 0; i < 1e6; i++ {
			x += i
		}
		after, err := procCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time did not grow in 5 s of work (%v, x=%d)", after, x)
		}
	}
}

func listenLoopback(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, "http://" + ln.Addr().String()
}
