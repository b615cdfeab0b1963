// Package slacktest is a Slack server for tests, speaking Slack's documented wire formats:
// Web API methods as form POSTs to /api/<method> answered with {"ok":...} (auth.test,
// apps.connections.open, chat.postMessage, chat.update, chat.delete,
// files.getUploadURLExternal + the upload URL + files.completeUploadExternal), a 429 with
// Retry-After on demand, private file downloads that need the bot token, the Socket Mode
// WebSocket (hello, events_api envelopes, envelope acks, unacknowledged envelopes retried on
// Slack's schedule, WebSocket pings) and signed Events API
// requests. It records every call. It fakes the remote platform only: the adapter talks to it
// over HTTP and WebSocket.
package slacktest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Call is one recorded Web API call.
type Call struct {
	Method string // Slack method ("chat.postMessage") or "upload"
	Params url.Values
	Files  map[string][]byte
	Token  string
	Status int
	TS     string // the ts answered (chat.postMessage / chat.update)
	Time   time.Time
}

// Socket is one Socket Mode connection.
type Socket struct {
	Opened, Closed time.Time
}

type socket struct {
	Socket
	conn *websocket.Conn
	wmu  sync.Mutex
}

// Fake is the server.
type Fake struct {
	t                  testing.TB
	BotToken, AppToken string
	UserID, BotID      string
	srv                *httptest.Server
	mu                 sync.Mutex
	calls              []Call
	sockets            []*socket
	acked              map[string]bool
	delivered          map[string]int
	files              map[string][]byte
	uploads            map[string][]byte
	fail               map[string][]int
	ts                 int64
	env                int
	change             chan struct{}
	pending            map[string]*envelope // unacknowledged envelopes, retried on Slack's schedule
	down               bool                 // Socket Mode connections are refused
	retryDelays        []time.Duration
	ackTimeout         time.Duration
}

// SetRetries sets Slack's retry schedule for an envelope not acknowledged within ackTimeout:
// retry n goes out delays[n-1] after the previous attempt timed out. The default is Slack's
// (3 s; at once, after 1 minute, after 5 minutes); tests compress it. An attempt made while no
// socket is open fails and counts.
func (f *Fake) SetRetries(ackTimeout time.Duration, delays ...time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ackTimeout, f.retryDelays = ackTimeout, delays
}

type envelope struct {
	id       string
	typ      string // "events_api" or "interactive"
	payload  map[string]any
	attempts int       // deliveries tried so far
	next     time.Time // when the next retry is due (zero: no more retries)
}

// Deliveries reports how many times envelope id was sent on a socket (0 for unknown ids or
// ones that found no socket open).
func (f *Fake) Deliveries(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delivered[id]
}

// SetSocketsDown makes the Socket Mode endpoint refuse new connections (HTTP 503 on the
// upgrade) while down is true; open sockets stay open.
func (f *Fake) SetSocketsDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// New starts the fake on loopback.
func New(t testing.TB, botToken, appToken, userID, botID string) *Fake {
	f := &Fake{t: t, BotToken: botToken, AppToken: appToken, UserID: userID, BotID: botID, acked: map[string]bool{}, delivered: map[string]int{},
		pending: map[string]*envelope{}, ackTimeout: 3 * time.Second,
		retryDelays: []time.Duration{0, time.Minute, 5 * time.Minute},
		files:       map[string][]byte{}, uploads: map[string][]byte{}, fail: map[string][]int{}, ts: 1700000000000100, change: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/{method}", f.serveAPI)
	mux.HandleFunc("POST /upload/{file}", f.serveUpload)
	mux.HandleFunc("GET /files-pri/{path...}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.BotToken {
			http.Error(w, "sign in", http.StatusForbidden)
			return
		}
		f.mu.Lock()
		b, ok := f.files[r.PathValue("path")]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /link", f.serveSocket)
	f.srv = httptest.NewServer(mux)
	stop := make(chan struct{})
	retries := make(chan struct{})
	go func() { defer close(retries); f.retryLoop(stop) }()
	t.Cleanup(func() {
		close(stop)
		<-retries
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// URL is the API base (apiBase): <server>/api.
func (f *Fake) URL() string { return f.srv.URL + "/api" }

func (f *Fake) changed() {
	close(f.change)
	f.change = make(chan struct{})
}

func (f *Fake) nextTS() string {
	f.ts += 100
	return fmt.Sprintf("%d.%06d", f.ts/1000000, f.ts%1000000)
}

// AddFile serves b as a private file and returns its url_private.
func (f *Fake) AddFile(path string, b []byte) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path] = b
	return f.srv.URL + "/files-pri/" + path
}

// FailNext answers the next n calls of method with status (429 with Retry-After: 1).
func (f *Fake) FailNext(method string, n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.fail[method] = append(f.fail[method], status)
	}
}

// Message is an event_callback payload with a message event; channelType "im" is a DM.
func (f *Fake) Message(channel, channelType, user, ts, text string) map[string]any {
	return map[string]any{
		"token": "verification-token", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
		"event_id": "Ev" + strings.ReplaceAll(ts, ".", ""), "event_time": 1700000000,
		"event": map[string]any{"type": "message", "channel": channel, "channel_type": channelType, "user": user,
			"text": text, "ts": ts, "event_ts": ts, "client_msg_id": "cm-" + ts, "team": "T1"},
	}
}

// Event returns the message's inner event for changes.
func Event(m map[string]any) map[string]any { return m["event"].(map[string]any) }

// Push sends payload in an events_api envelope on the newest open socket (Slack picks one
// connection per event) and returns the envelope id. An envelope that is not acknowledged
// within AckTimeout (also one pushed while no socket is open) is sent again on the
// RetryDelays schedule, with retry_attempt and retry_reason set, as Slack does.
func (f *Fake) Push(payload map[string]any) string { return f.push("events_api", payload) }

// PushInteractive sends an interaction payload (block_actions, ...) in an "interactive"
// envelope, as Slack does for a button press in Socket Mode; otherwise like Push.
func (f *Fake) PushInteractive(payload map[string]any) string { return f.push("interactive", payload) }

func (f *Fake) push(typ string, payload map[string]any) string {
	f.mu.Lock()
	f.env++
	e := &envelope{id: fmt.Sprintf("env-%d", f.env), typ: typ, payload: payload}
	f.pending[e.id] = e
	f.mu.Unlock()
	f.attempt(e)
	return e.id
}

// attempt delivers e once (if a socket is open) and schedules its next retry.
func (f *Fake) attempt(e *envelope) {
	f.mu.Lock()
	var s *socket
	for i := len(f.sockets) - 1; i >= 0; i-- {
		if f.sockets[i].Closed.IsZero() {
			s = f.sockets[i]
			break
		}
	}
	n := e.attempts
	e.attempts++
	e.next = time.Time{}
	if n < len(f.retryDelays) {
		e.next = time.Now().Add(f.ackTimeout + f.retryDelays[n])
	}
	f.mu.Unlock()
	if s == nil {
		return
	}
	reason := ""
	if n > 0 {
		reason = "timeout"
	}
	s.wmu.Lock()
	err := s.conn.WriteJSON(map[string]any{"envelope_id": e.id, "type": e.typ, "payload": e.payload,
		"accepts_response_payload": false, "retry_attempt": n, "retry_reason": reason})
	s.wmu.Unlock()
	if err == nil {
		f.mu.Lock()
		f.delivered[e.id]++
		f.changed()
		f.mu.Unlock()
	}
}

// retryLoop sends again what is due, until the fake closes.
func (f *Fake) retryLoop(stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		var due []*envelope
		f.mu.Lock()
		for id, e := range f.pending {
			switch {
			case f.acked[id]:
				delete(f.pending, id)
			case e.next.IsZero():
				delete(f.pending, id) // retries exhausted: Slack drops the event
			case now.After(e.next):
				due = append(due, e)
			}
		}
		f.mu.Unlock()
		for _, e := range due {
			f.attempt(e)
		}
	}
}

// Acked reports whether envelope id was acknowledged.
func (f *Fake) Acked(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acked[id]
}

// Sockets returns the Socket Mode connections so far.
func (f *Fake) Sockets() []Socket {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Socket, len(f.sockets))
	for i, s := range f.sockets {
		out[i] = s.Socket
	}
	return out
}

// OpenSockets counts the open Socket Mode connections.
func (f *Fake) OpenSockets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.sockets {
		if s.Closed.IsZero() {
			n++
		}
	}
	return n
}

// WaitSockets waits until n sockets are open.
func (f *Fake) WaitSockets(n int, timeout time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for f.OpenSockets() != n {
		if time.Now().After(deadline) {
			f.t.Fatalf("slacktest: %d sockets open after %v, want %d", f.OpenSockets(), timeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Sign returns the X-Slack-Request-Timestamp and X-Slack-Signature headers of body.
func Sign(secret string, body []byte, now time.Time) (string, string) {
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	_, _ = mac.Write([]byte("v0:" + ts + ":"))
	_, _ = mac.Write(body)
	return ts, "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// Calls returns the recorded calls.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// WaitCalls waits for n calls that keep accepts and returns them.
func (f *Fake) WaitCalls(n int, timeout time.Duration, keep func(Call) bool) []Call {
	f.t.Helper()
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		var got []Call
		for _, c := range f.calls {
			if keep(c) {
				got = append(got, c)
			}
		}
		ch := f.change
		f.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-deadline:
			f.t.Fatalf("slacktest: %d of %d calls after %v; all calls: %+v", len(got), n, timeout, f.Calls())
		}
	}
}

func (f *Fake) record(c Call) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	f.changed()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Fake) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	if err := r.ParseForm(); err != nil {
		writeJSON(w, 200, map[string]any{"ok": false, "error": "invalid_form_data"})
		return
	}
	c := Call{Method: method, Params: r.PostForm, Time: time.Now()}
	c.Token = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if c.Token == "" {
		c.Token = r.PostForm.Get("token")
	}
	want := f.BotToken
	if method == "apps.connections.open" {
		want = f.AppToken
	}
	if c.Token != want {
		c.Status = 200
		f.record(c)
		writeJSON(w, 200, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	f.mu.Lock()
	status := 0
	if q := f.fail[method]; len(q) > 0 {
		status, f.fail[method] = q[0], q[1:]
	}
	f.mu.Unlock()
	if status != 0 {
		c.Status = status
		f.record(c)
		if status == 429 {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, status, map[string]any{"ok": false, "error": "ratelimited"})
		return
	}
	c.Status = 200
	var ans map[string]any
	switch method {
	case "auth.test":
		ans = map[string]any{"ok": true, "url": "https://fake.slack.com/", "team": "Fake", "user": "agentbus", "team_id": "T1", "user_id": f.UserID, "bot_id": f.BotID}
	case "apps.connections.open":
		ans = map[string]any{"ok": true, "url": "ws://" + r.Host + "/link?ticket=t1"}
	case "chat.postMessage":
		f.mu.Lock()
		c.TS = f.nextTS()
		f.mu.Unlock()
		ans = map[string]any{"ok": true, "channel": c.Params.Get("channel"), "ts": c.TS,
			"message": map[string]any{"type": "message", "text": c.Params.Get("text"), "user": f.UserID, "bot_id": f.BotID, "ts": c.TS}}
	case "chat.update":
		c.TS = c.Params.Get("ts")
		ans = map[string]any{"ok": true, "channel": c.Params.Get("channel"), "ts": c.TS, "text": c.Params.Get("text")}
	case "chat.delete":
		ans = map[string]any{"ok": true, "channel": c.Params.Get("channel"), "ts": c.Params.Get("ts")}
	case "files.getUploadURLExternal":
		f.mu.Lock()
		f.env++
		id := fmt.Sprintf("F%d", f.env)
		f.mu.Unlock()
		ans = map[string]any{"ok": true, "upload_url": "http://" + r.Host + "/upload/" + id, "file_id": id}
	case "files.completeUploadExternal":
		var files []map[string]any
		_ = json.Unmarshal([]byte(c.Params.Get("files")), &files)
		f.mu.Lock()
		c.Files = map[string][]byte{}
		for _, fl := range files {
			id, _ := fl["id"].(string)
			c.Files[id] = f.uploads[id]
		}
		f.mu.Unlock()
		ans = map[string]any{"ok": true, "files": files}
	default:
		ans = map[string]any{"ok": false, "error": "unknown_method"}
	}
	f.record(c)
	writeJSON(w, 200, ans)
}

func (f *Fake) serveUpload(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("file")
	c := Call{Method: "upload", Files: map[string][]byte{}, Time: time.Now(), Status: 200}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var data []byte
	if ct == "multipart/form-data" {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(p)
			if p.FileName() != "" {
				data = b
			}
		}
	} else {
		data, _ = io.ReadAll(r.Body)
	}
	c.Files[id] = data
	f.mu.Lock()
	f.uploads[id] = bytes.Clone(data)
	f.mu.Unlock()
	f.record(c)
	_, _ = fmt.Fprintf(w, "OK - %d", len(data))
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (f *Fake) serveSocket(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		http.Error(w, "socket mode unavailable", http.StatusServiceUnavailable)
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	s := &socket{conn: conn, Socket: Socket{Opened: time.Now()}}
	f.mu.Lock()
	f.sockets = append(f.sockets, s)
	n := 0
	for _, x := range f.sockets {
		if x.Closed.IsZero() {
			n++
		}
	}
	f.changed()
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		s.Closed = time.Now()
		f.changed()
		f.mu.Unlock()
	}()
	s.wmu.Lock()
	err = conn.WriteJSON(map[string]any{"type": "hello", "num_connections": n,
		"debug_info": map[string]any{"host": "fake", "approximate_connection_time": 3600}, "connection_info": map[string]any{"app_id": "A1"}})
	s.wmu.Unlock()
	if err != nil {
		return
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.wmu.Lock()
				_ = conn.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(time.Second))
				s.wmu.Unlock()
			}
		}
	}()
	for {
		_, b, err := conn.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if json.Unmarshal(b, &ack) == nil && ack.EnvelopeID != "" {
			f.mu.Lock()
			f.acked[ack.EnvelopeID] = true
			f.changed()
			f.mu.Unlock()
		}
	}
}
