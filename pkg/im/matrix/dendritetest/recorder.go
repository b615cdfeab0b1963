package dendritetest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Call is one request that went through a Recorder.
type Call struct {
	Method string
	Path   string // URL path, unescaped
	Status int
	Body   []byte // the request body when it is JSON (not uploads)
	Time   time.Time
}

// Recorder is a reverse proxy in front of a homeserver that records every request with the
// status the homeserver answered, so a test sees what the adapter did (edits, typing,
// uploads, 429s). It changes nothing on the way.
type Recorder struct {
	// URL is the proxy's base URL, to configure as the adapter's homeserver.
	URL   string
	mu    sync.Mutex
	calls []Call
}

// NewRecorder starts a recording proxy to target on loopback until the test ends.
func NewRecorder(t testing.TB, target string) *Recorder {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &Recorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	proxy.ModifyResponse = func(resp *http.Response) error {
		c := resp.Request.Context().Value(callKey{}).(*Call)
		c.Status = resp.StatusCode
		r.mu.Lock()
		r.calls = append(r.calls, *c)
		r.mu.Unlock()
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := &Call{Method: req.Method, Path: req.URL.Path, Time: time.Now()}
		if req.Header.Get("Content-Type") == "application/json" && req.Body != nil {
			b, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
			req.Body = io.NopCloser(bytes.NewReader(b))
			c.Body = b
		}
		proxy.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), callKey{}, c)))
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	r.URL = srv.URL
	return r
}

type callKey struct{}

// Calls returns the calls so far whose request matched keep (nil keep: all).
func (r *Recorder) Calls(keep func(Call) bool) []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Call
	for _, c := range r.calls {
		if keep == nil || keep(c) {
			out = append(out, c)
		}
	}
	return out
}
