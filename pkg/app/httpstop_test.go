package app

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Stopping the webhook server lets a request in flight finish and does not wait for a
// connection that never sent a request (http.Server.Shutdown alone waits 5 s for those).
func TestWebhookServerStop(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	ws := newWebhookServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "stored")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ws.srv.Serve(ln) }()

	unused, err := net.Dial("tcp", ln.Addr().String()) // opened, never used
	if err != nil {
		t.Fatal(err)
	}
	defer unused.Close()
	type reply struct {
		body string
		err  error
	}
	got := make(chan reply, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/", "text/plain", nil)
		if err != nil {
			got <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- reply{string(b), err}
	}()
	<-entered

	stopped := make(chan struct{})
	go func() {
		ws.stop(10 * time.Minute)
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while a request was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if r := <-got; r.err != nil || r.body != "stored" {
		t.Fatalf("request in flight: %q, %v", r.body, r.err)
	}
	// Shutdown alone closes a connection that never sent a request once it is 5 s old; stop
	// must not wait for that (it takes milliseconds).
	select {
	case <-stopped:
	case <-time.After(4 * time.Second):
		t.Fatal("stop waited for the unused connection")
	}
	if _, err := unused.Read(make([]byte, 1)); err == nil {
		t.Fatal("the unused connection is still open")
	}
}
