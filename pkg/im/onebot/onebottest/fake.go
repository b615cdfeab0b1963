// Package onebottest is a OneBot v11 implementation for tests, speaking the standard's wire
// format: it accepts forward WebSocket clients (the role NapCat/LLOneBot play when agentbus
// dials them), serves the HTTP API (POST /<action>), pushes events to connected clients or
// POSTs them, dials a reverse WebSocket, serves image bytes from its own loopback address,
// and records every API call. It is a fake of the remote platform only: agentbus's code
// talks to it over real sockets.
package onebottest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Call is one recorded API call.
type Call struct {
	Action string
	Params map[string]any
	Via    string // "ws" (forward), "ws-reverse" or "http"
	Conn   int    // which WebSocket connection (1-based), 0 for HTTP
	Time   time.Time
}

// Segments returns params.message as a list of {type, data}.
func (c Call) Segments() []map[string]any {
	arr, _ := c.Params["message"].([]any)
	out := make([]map[string]any, 0, len(arr))
	for _, a := range arr {
		if m, ok := a.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// Text joins the text segments of params.message.
func (c Call) Text() string {
	var b strings.Builder
	for _, s := range c.Segments() {
		if s["type"] == "text" {
			d, _ := s["data"].(map[string]any)
			t, _ := d["text"].(string)
			b.WriteString(t)
		}
	}
	return b.String()
}

// Fake is the implementation.
type Fake struct {
	t      testing.TB
	Token  string // access token required of clients (and sent when dialing reverse)
	SelfID int64
	srv    *httptest.Server

	mu      sync.Mutex
	conns   map[int]*websocket.Conn
	nconn   int
	calls   []Call
	changed chan struct{}
	images  map[string][]byte
	// fail answers the next HTTP API calls with these statuses (e.g. 429) before succeeding.
	fail      []int
	retryAfer string
	msgID     atomic.Int64
	history   map[string][]map[string]any // "group:<id>" / "private:<user>" -> message events, oldest first
	down      bool                        // WebSocket clients are refused
	noHistory bool                        // the history actions answer 1404
}

// SetDown makes the implementation refuse new WebSocket clients (HTTP 503) while down is
// true; open connections stay open.
func (f *Fake) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// SetHistorySupported turns the history extensions (get_group_msg_history,
// get_friend_msg_history, as NapCat, LLOneBot and Lagrange.OneBot have them) on (the
// default) or off (retcode 1404, like a bare OneBot v11 implementation).
func (f *Fake) SetHistorySupported(ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noHistory = !ok
}

// remember adds a message event to its scene's history (once per message id).
func (f *Fake) rememberLocked(ev map[string]any) {
	if ev["post_type"] != "message" {
		return
	}
	key := ""
	switch ev["message_type"] {
	case "group":
		key = fmt.Sprint("group:", ev["group_id"])
	case "private":
		peer := ev["user_id"]
		if t, ok := ev["target_id"]; ok { // the bot's own message to the user
			peer = t
		}
		key = fmt.Sprint("private:", peer)
	default:
		return
	}
	for _, h := range f.history[key] {
		if fmt.Sprint(h["message_id"]) == fmt.Sprint(ev["message_id"]) {
			return
		}
	}
	f.history[key] = append(f.history[key], ev)
}

// historyAnswer answers get_group_msg_history / get_friend_msg_history: the count (default
// 20) latest messages of the scene, oldest first, in {"messages": [...]}, as NapCat does
// (message_seq 0 or absent: the latest).
func (f *Fake) historyAnswer(action string, params map[string]any) (any, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noHistory {
		return nil, false
	}
	key := fmt.Sprint("group:", params["group_id"])
	if action == "get_friend_msg_history" {
		key = fmt.Sprint("private:", params["user_id"])
	}
	count := 20
	if n, err := strconv.Atoi(fmt.Sprint(params["count"])); err == nil && n > 0 {
		count = n
	}
	h := f.history[key]
	if len(h) > count {
		h = h[len(h)-count:]
	}
	out := make([]map[string]any, len(h))
	copy(out, h)
	return map[string]any{"messages": out}, true
}

// New starts the fake on a loopback port.
func New(t testing.TB, token string, selfID int64) *Fake {
	f := &Fake{t: t, Token: token, SelfID: selfID, conns: map[int]*websocket.Conn{}, changed: make(chan struct{}), images: map[string][]byte{},
		history: map[string][]map[string]any{}}
	f.msgID.Store(9000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", f.serveWS)
	mux.HandleFunc("GET /img/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.images[r.PathValue("name")]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("POST /{action}", f.serveHTTPAPI)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// Close stops the server and its connections.
func (f *Fake) Close() {
	f.mu.Lock()
	for _, c := range f.conns {
		c.CloseNow()
	}
	f.mu.Unlock()
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// WSURL is the forward WebSocket endpoint (apiBase of mode ws).
func (f *Fake) WSURL() string { return "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/" }

// HTTPURL is the HTTP API base (apiBase of mode http).
func (f *Fake) HTTPURL() string { return f.srv.URL }

// AddImage serves b at /img/<name> and returns its URL (on 127.0.0.1, as a real
// implementation on the same host does).
func (f *Fake) AddImage(name string, b []byte) string {
	f.mu.Lock()
	f.images[name] = b
	f.mu.Unlock()
	return f.srv.URL + "/img/" + name
}

// FailNext makes the next len(statuses) HTTP API calls answer with those statuses (and
// Retry-After: retryAfter when set).
func (f *Fake) FailNext(retryAfter string, statuses ...int) {
	f.mu.Lock()
	f.fail = append(f.fail, statuses...)
	f.retryAfer = retryAfter
	f.mu.Unlock()
}

func (f *Fake) authorized(r *http.Request) bool {
	if f.Token == "" {
		return true
	}
	return r.Header.Get("Authorization") == "Bearer "+f.Token || r.URL.Query().Get("access_token") == f.Token
}

func (f *Fake) serveWS(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	if !f.authorized(r) {
		http.Error(w, `{"status":"failed","retcode":1401}`, http.StatusUnauthorized)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.nconn++
	id := f.nconn
	f.conns[id] = c
	f.notifyLocked()
	f.mu.Unlock()
	// The lifecycle event implementations send first.
	_ = f.write(c, map[string]any{"time": time.Now().Unix(), "self_id": f.SelfID, "post_type": "meta_event",
		"meta_event_type": "lifecycle", "sub_type": "connect"})
	f.readLoop(c, id, "ws")
}

func (f *Fake) readLoop(c *websocket.Conn, id int, via string) {
	defer func() {
		f.mu.Lock()
		delete(f.conns, id)
		f.notifyLocked()
		f.mu.Unlock()
		c.CloseNow()
	}()
	for {
		_, b, err := c.Read(context.Background())
		if err != nil {
			return
		}
		var req struct {
			Action string          `json:"action"`
			Params map[string]any  `json:"params"`
			Echo   json.RawMessage `json:"echo"`
		}
		if json.Unmarshal(b, &req) != nil {
			continue
		}
		if req.Action == "get_group_msg_history" || req.Action == "get_friend_msg_history" {
			f.mu.Lock()
			f.calls = append(f.calls, Call{Action: req.Action, Params: req.Params, Via: via, Conn: id, Time: time.Now()})
			f.notifyLocked()
			f.mu.Unlock()
			if data, ok := f.historyAnswer(req.Action, req.Params); ok {
				_ = f.write(c, map[string]any{"status": "ok", "retcode": 0, "data": data, "echo": req.Echo})
			} else {
				_ = f.write(c, map[string]any{"status": "failed", "retcode": 1404, "msg": "API not found", "wording": "API not found", "data": nil, "echo": req.Echo})
			}
			continue
		}
		data := f.record(Call{Action: req.Action, Params: req.Params, Via: via, Conn: id, Time: time.Now()})
		_ = f.write(c, map[string]any{"status": "ok", "retcode": 0, "data": data, "echo": req.Echo})
	}
}

func (f *Fake) record(c Call) any {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.notifyLocked()
	f.mu.Unlock()
	switch c.Action {
	case "send_msg", "send_group_msg", "send_private_msg":
		id := f.msgID.Add(1)
		// The bot's own message is in the scene's history, as implementations keep it.
		ev := map[string]any{"time": time.Now().Unix(), "self_id": f.SelfID, "post_type": "message", "message_id": id,
			"user_id": f.SelfID, "message": c.Params["message"], "sender": map[string]any{"user_id": f.SelfID, "nickname": "bot"}}
		switch {
		case c.Params["group_id"] != nil:
			ev["message_type"], ev["group_id"] = "group", c.Params["group_id"]
		default:
			ev["message_type"], ev["target_id"] = "private", c.Params["user_id"]
		}
		f.mu.Lock()
		f.rememberLocked(ev)
		f.mu.Unlock()
		return map[string]any{"message_id": id}
	case "get_login_info":
		return map[string]any{"user_id": f.SelfID, "nickname": "bot"}
	}
	return nil
}

func (f *Fake) serveHTTPAPI(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(r) {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	if len(f.fail) > 0 {
		code := f.fail[0]
		f.fail = f.fail[1:]
		ra := f.retryAfer
		f.calls = append(f.calls, Call{Action: r.PathValue("action"), Via: "http", Time: time.Now(), Params: map[string]any{"failedWith": code}})
		f.notifyLocked()
		f.mu.Unlock()
		if ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(code)
		return
	}
	f.mu.Unlock()
	var params map[string]any
	_ = json.NewDecoder(r.Body).Decode(&params)
	data := f.record(Call{Action: r.PathValue("action"), Params: params, Via: "http", Time: time.Now()})
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "retcode": 0, "data": data})
}

func (f *Fake) write(c *websocket.Conn, v any) error {
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Write(ctx, websocket.MessageText, b)
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Conns returns the ids of the WebSocket connections open now.
func (f *Fake) Conns() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []int
	for id := range f.conns {
		ids = append(ids, id)
	}
	return ids
}

// WaitConn waits until a connection other than the ones in not is open, and returns its id.
func (f *Fake) WaitConn(timeout time.Duration, not ...int) int {
	f.t.Helper()
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		for id := range f.conns {
			skip := false
			for _, n := range not {
				skip = skip || n == id
			}
			if !skip {
				f.mu.Unlock()
				return id
			}
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			f.t.Fatalf("onebottest: no new connection within %v", timeout)
			return 0
		}
	}
}

// Push sends ev to every open forward/reverse connection (as an implementation broadcasts an
// event to all its clients).
//
// A message event is also kept in its scene's history (what the history actions list), so
// one pushed while no client is connected can still be fetched.
func (f *Fake) Push(ev map[string]any) int {
	f.mu.Lock()
	f.rememberLocked(ev)
	conns := make([]*websocket.Conn, 0, len(f.conns))
	for _, c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	n := 0
	for _, c := range conns {
		if f.write(c, ev) == nil {
			n++
		}
	}
	return n
}

// Post POSTs ev to url (http mode event reporting) with the access token.
func (f *Fake) Post(url string, ev map[string]any) (int, error) {
	b, _ := json.Marshal(ev)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Self-ID", strconv.FormatInt(f.SelfID, 10))
	if f.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// DialReverse connects to agentbus's reverse WebSocket endpoint (ws://.../onebot/<bot>/ws)
// and serves it like a forward connection: events pushed with Push, API calls answered.
func (f *Fake) DialReverse(ctx context.Context, url string) error {
	h := http.Header{}
	if f.Token != "" {
		h.Set("Authorization", "Bearer "+f.Token)
	}
	h.Set("X-Self-ID", strconv.FormatInt(f.SelfID, 10))
	h.Set("X-Client-Role", "Universal")
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil {
			return fmt.Errorf("dial reverse: HTTP %d: %w", resp.StatusCode, err)
		}
		return fmt.Errorf("dial reverse: %w", err)
	}
	f.mu.Lock()
	f.nconn++
	id := f.nconn
	f.conns[id] = c
	f.notifyLocked()
	f.mu.Unlock()
	go f.readLoop(c, id, "ws-reverse")
	return nil
}

// Calls returns the recorded calls so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// WaitCalls waits until keep accepts at least n calls and returns those.
func (f *Fake) WaitCalls(n int, timeout time.Duration, keep func(Call) bool) []Call {
	f.t.Helper()
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		var got []Call
		for _, c := range f.calls {
			if keep == nil || keep(c) {
				got = append(got, c)
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-deadline:
			f.t.Fatalf("onebottest: %d of %d calls within %v: %+v", len(got), n, timeout, got)
			return nil
		}
	}
}

// PrivateMessage is a private message event from user.
func (f *Fake) PrivateMessage(id, user int64, msg []map[string]any) map[string]any {
	return map[string]any{"time": time.Now().Unix(), "self_id": f.SelfID, "post_type": "message", "message_type": "private",
		"sub_type": "friend", "message_id": id, "user_id": user, "message": msg, "font": 0,
		"sender": map[string]any{"user_id": user, "nickname": "user" + strconv.FormatInt(user, 10)}}
}

// GroupMessage is a group message event; role is the sender's group role (owner, admin, member).
func (f *Fake) GroupMessage(id, group, user int64, role string, msg []map[string]any) map[string]any {
	return map[string]any{"time": time.Now().Unix(), "self_id": f.SelfID, "post_type": "message", "message_type": "group",
		"sub_type": "normal", "message_id": id, "group_id": group, "user_id": user, "message": msg, "font": 0,
		"sender": map[string]any{"user_id": user, "nickname": "user" + strconv.FormatInt(user, 10), "card": "", "role": role}}
}

// Text, At, Image and Reply build segments.
func Text(s string) map[string]any {
	return map[string]any{"type": "text", "data": map[string]any{"text": s}}
}
func At(qq int64) map[string]any {
	return map[string]any{"type": "at", "data": map[string]any{"qq": strconv.FormatInt(qq, 10)}}
}
func Image(file, url string) map[string]any {
	return map[string]any{"type": "image", "data": map[string]any{"file": file, "url": url}}
}
func Reply(id int64) map[string]any {
	return map[string]any{"type": "reply", "data": map[string]any{"id": strconv.FormatInt(id, 10)}}
}
