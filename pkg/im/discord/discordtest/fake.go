// Package discordtest is a Discord server for tests, speaking Discord's documented wire
// formats: the REST API under /api/v<n> (v9, which discordgo speaks, or v10) (GET /gateway,
// GET channel messages after an id from the history of every dispatched message, create / edit / delete message with
// interaction callbacks (POST /interactions/{id}/{token}/callback, recorded as "interactionCallback"),
// JSON or multipart payload_json + files[n] bodies, trigger typing, 429 with a retry_after
// body and Retry-After header on demand), the gateway WebSocket (op 10 Hello, op 2 Identify,
// op 0 READY and MESSAGE_CREATE dispatches with sequence numbers, op 1 heartbeats acked with
// op 11) and a CDN path serving attachments. It records every REST call and every gateway
// session. It fakes the remote platform only: the adapter talks to it over HTTP and WebSocket.
package discordtest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Call is one recorded REST call.
type Call struct {
	Method  string // HTTP method
	Route   string // "createMessage", "editMessage", "deleteMessage", "typing", "getMessages"
	Channel string
	Message string         // the message id for edit / delete
	Body    map[string]any // the JSON payload (payload_json for multipart)
	Files   map[string][]byte
	Auth    string
	Status  int
	Time    time.Time
}

// Content is the call's message content.
func (c Call) Content() string { s, _ := c.Body["content"].(string); return s }

// ReplyTo is message_reference.message_id of the call.
func (c Call) ReplyTo() string {
	r, _ := c.Body["message_reference"].(map[string]any)
	s, _ := r["message_id"].(string)
	return s
}

// Session is one gateway connection that identified.
type Session struct {
	Token   string
	Intents int
	Opened  time.Time
	Closed  time.Time // zero while open
}

type session struct {
	Session
	conn *websocket.Conn
	seq  int
	wmu  sync.Mutex
}

// Fake is the server.
type Fake struct {
	t        testing.TB
	Token    string // the bot token, without "Bot "
	BotID    string
	Name     string
	srv      *httptest.Server
	mu       sync.Mutex
	calls    []Call
	sessions []*session
	files    map[string][]byte
	fail     map[string][]int // route -> statuses to answer next
	nextID   int64
	change   chan struct{}
	history  map[string][]map[string]any // channel -> messages in id order (what GET messages lists)
	down     bool                        // the gateway refuses connections
}

// SetGatewayDown makes the gateway refuse new connections (HTTP 503 on the upgrade) while
// down is true; open sessions stay open.
func (f *Fake) SetGatewayDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// New starts the fake on loopback.
func New(t testing.TB, token, botID, name string) *Fake {
	f := &Fake{t: t, Token: token, BotID: botID, Name: name, files: map[string][]byte{}, fail: map[string][]int{}, history: map[string][]map[string]any{},
		nextID: 1300000000000000000, change: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/{v}/gateway", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]string{"url": "ws://" + r.Host + "/gateway"})
	})
	mux.HandleFunc("GET /gateway", f.serveGateway)
	mux.HandleFunc("GET /gateway/", f.serveGateway) // discordgo adds a slash
	mux.HandleFunc("POST /api/{v}/channels/{channel}/messages", func(w http.ResponseWriter, r *http.Request) { f.serveREST(w, r, "createMessage") })
	mux.HandleFunc("PATCH /api/{v}/channels/{channel}/messages/{message}", func(w http.ResponseWriter, r *http.Request) { f.serveREST(w, r, "editMessage") })
	mux.HandleFunc("DELETE /api/{v}/channels/{channel}/messages/{message}", func(w http.ResponseWriter, r *http.Request) { f.serveREST(w, r, "deleteMessage") })
	mux.HandleFunc("GET /api/{v}/channels/{channel}/messages", f.serveHistory)
	mux.HandleFunc("POST /api/{v}/channels/{channel}/typing", func(w http.ResponseWriter, r *http.Request) { f.serveREST(w, r, "typing") })
	mux.HandleFunc("POST /api/{v}/interactions/{id}/{token}/callback", func(w http.ResponseWriter, r *http.Request) {
		// The interaction token authorizes the callback, not the bot token.
		c := Call{Method: r.Method, Route: "interactionCallback", Message: r.PathValue("id"), Auth: r.PathValue("token"),
			Time: time.Now(), Files: map[string][]byte{}, Status: 204}
		if err := readBody(r, &c); err != nil {
			c.Status = 400
		}
		f.record(c)
		w.WriteHeader(c.Status)
	})
	mux.HandleFunc("GET /attachments/{path...}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.files[r.PathValue("path")]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// URL is the API base (apiBase).
func (f *Fake) URL() string { return f.srv.URL }

func (f *Fake) id() string {
	f.nextID++
	return fmt.Sprint(f.nextID)
}

func (f *Fake) changed() {
	close(f.change)
	f.change = make(chan struct{})
}

// AddFile serves b under the CDN path and returns its URL.
func (f *Fake) AddFile(path string, b []byte) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path] = b
	return f.srv.URL + "/attachments/" + path
}

// FailNext answers the next n calls of route with status (429 comes with retry_after 1 s).
func (f *Fake) FailNext(route string, n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.fail[route] = append(f.fail[route], status)
	}
}

// Message is a MESSAGE_CREATE payload: a DM when guild is "", else a guild channel message.
func (f *Fake) Message(id, channel, guild, authorID, content string) map[string]any {
	m := map[string]any{
		"id": id, "channel_id": channel, "type": 0, "content": content,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "tts": false, "mention_everyone": false,
		"author":   map[string]any{"id": authorID, "username": "user" + authorID, "global_name": "User " + authorID, "discriminator": "0"},
		"mentions": []any{}, "attachments": []any{}, "embeds": []any{},
	}
	if guild != "" {
		m["guild_id"] = guild
		m["member"] = map[string]any{"roles": []any{}, "joined_at": "2024-01-01T00:00:00Z"}
	}
	return m
}

// Mention prefixes content with the bot's mention (<@id>) and lists it in mentions.
func (f *Fake) Mention(m map[string]any) map[string]any {
	m["content"] = "<@" + f.BotID + "> " + m["content"].(string)
	m["mentions"] = []any{map[string]any{"id": f.BotID, "username": f.Name, "bot": true, "discriminator": "0"}}
	return m
}

// DispatchEvent sends a dispatch of type t with payload d (INTERACTION_CREATE, say) to every
// open gateway session; it reports how many got it.
func (f *Fake) DispatchEvent(t string, d map[string]any) int {
	f.mu.Lock()
	open := []*session{}
	for _, s := range f.sessions {
		if s.Closed.IsZero() {
			open = append(open, s)
		}
	}
	f.mu.Unlock()
	n := 0
	for _, s := range open {
		if s.dispatch(t, d) == nil {
			n++
		}
	}
	return n
}

// Dispatch stores m in its channel's history and sends MESSAGE_CREATE to every open gateway
// session (as Discord does to every session of the bot); it reports how many got it. A
// message dispatched while no session is open is only in the history (GET messages).
func (f *Fake) Dispatch(m map[string]any) int {
	f.mu.Lock()
	if ch, _ := m["channel_id"].(string); ch != "" && !slices.ContainsFunc(f.history[ch], func(h map[string]any) bool { return h["id"] == m["id"] }) {
		f.history[ch] = append(f.history[ch], m)
	}
	open := []*session{}
	for _, s := range f.sessions {
		if s.Closed.IsZero() {
			open = append(open, s)
		}
	}
	f.mu.Unlock()
	n := 0
	for _, s := range open {
		if s.dispatch("MESSAGE_CREATE", m) == nil {
			n++
		}
	}
	return n
}

// Sessions returns the gateway sessions so far.
func (f *Fake) Sessions() []Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Session, len(f.sessions))
	for i, s := range f.sessions {
		out[i] = s.Session
	}
	return out
}

// OpenSessions counts the gateway sessions open now.
func (f *Fake) OpenSessions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.sessions {
		if s.Closed.IsZero() {
			n++
		}
	}
	return n
}

// WaitSessions waits until n sessions are open.
func (f *Fake) WaitSessions(n int, timeout time.Duration) {
	f.t.Helper()
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		ch := f.change
		f.mu.Unlock()
		if f.OpenSessions() == n {
			return
		}
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			f.t.Fatalf("discordtest: %d gateway sessions open after %v, want %d", f.OpenSessions(), timeout, n)
		}
	}
}

// Calls returns the recorded REST calls.
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
			f.t.Fatalf("discordtest: %d of %d calls after %v; all calls: %+v", len(got), n, timeout, f.Calls())
		}
	}
}

func (f *Fake) serveREST(w http.ResponseWriter, r *http.Request, route string) {
	c := Call{Method: r.Method, Route: route, Channel: r.PathValue("channel"), Message: r.PathValue("message"),
		Auth: r.Header.Get("Authorization"), Time: time.Now(), Files: map[string][]byte{}}
	if err := readBody(r, &c); err != nil {
		c.Status = 400
		f.record(c)
		writeJSON(w, 400, map[string]any{"code": 50035, "message": "Invalid Form Body: " + err.Error()})
		return
	}
	if c.Auth != "Bot "+f.Token {
		c.Status = 401
		f.record(c)
		writeJSON(w, 401, map[string]any{"code": 0, "message": "401: Unauthorized"})
		return
	}
	f.mu.Lock()
	status := 0
	if q := f.fail[route]; len(q) > 0 {
		status, f.fail[route] = q[0], q[1:]
	}
	f.mu.Unlock()
	if status == 429 {
		c.Status = 429
		f.record(c)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": 1.0, "global": false})
		return
	}
	if status != 0 {
		c.Status = status
		f.record(c)
		writeJSON(w, status, map[string]any{"code": 0, "message": http.StatusText(status)})
		return
	}
	switch route {
	case "typing", "deleteMessage":
		c.Status = 204
		f.record(c)
		w.WriteHeader(204)
		return
	}
	f.mu.Lock()
	id := c.Message
	if route == "createMessage" {
		id = f.id()
	}
	f.mu.Unlock()
	c.Status = 200
	c.Message = id
	f.record(c)
	msg := map[string]any{"id": id, "channel_id": c.Channel, "type": 0, "content": c.Body["content"],
		"author":    map[string]any{"id": f.BotID, "username": f.Name, "bot": true, "discriminator": "0"},
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "attachments": []any{}, "embeds": []any{}, "mentions": []any{}}
	writeJSON(w, 200, msg)
}

// serveHistory answers GET /channels/{id}/messages?after=<id>&limit=<n> (before and around
// are not modelled): the limit (default 50, at most 100) oldest messages after the id, listed
// newest first as Discord does, without guild_id and member (REST messages carry neither).
func (f *Fake) serveHistory(w http.ResponseWriter, r *http.Request) {
	c := Call{Method: r.Method, Route: "getMessages", Channel: r.PathValue("channel"), Auth: r.Header.Get("Authorization"),
		Time: time.Now(), Body: map[string]any{"after": r.URL.Query().Get("after"), "limit": r.URL.Query().Get("limit")}}
	if c.Auth != "Bot "+f.Token {
		c.Status = 401
		f.record(c)
		writeJSON(w, 401, map[string]any{"code": 0, "message": "401: Unauthorized"})
		return
	}
	f.mu.Lock()
	status := 0
	if q := f.fail[c.Route]; len(q) > 0 {
		status, f.fail[c.Route] = q[0], q[1:]
	}
	f.mu.Unlock()
	if status == 429 {
		c.Status = 429
		f.record(c)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": 1.0, "global": false})
		return
	}
	limit := 50
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
		limit = min(n, 100)
	}
	after := r.URL.Query().Get("after")
	f.mu.Lock()
	var page []map[string]any
	for _, m := range f.history[c.Channel] {
		if id, _ := m["id"].(string); after == "" || snowflakeAfter(id, after) {
			rest := map[string]any{}
			for k, v := range m {
				if k != "guild_id" && k != "member" {
					rest[k] = v
				}
			}
			page = append(page, rest)
		}
	}
	f.mu.Unlock()
	sort.Slice(page, func(i, j int) bool { return snowflakeAfter(page[j]["id"].(string), page[i]["id"].(string)) })
	if len(page) > limit {
		page = page[:limit]
	}
	slices.Reverse(page)
	c.Status = 200
	f.record(c)
	if page == nil {
		page = []map[string]any{}
	}
	writeJSON(w, 200, page)
}

func snowflakeAfter(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

func (f *Fake) record(c Call) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	f.changed()
}

func readBody(r *http.Request, c *Call) error {
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case ct == "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			b, err := io.ReadAll(p)
			if err != nil {
				return err
			}
			if p.FormName() == "payload_json" {
				if err := json.Unmarshal(b, &c.Body); err != nil {
					return err
				}
				continue
			}
			c.Files[p.FormName()+":"+p.FileName()] = b
		}
	case r.ContentLength == 0 || r.Body == nil:
		return nil
	default:
		b, err := io.ReadAll(r.Body)
		if err != nil || len(b) == 0 {
			return err
		}
		return json.Unmarshal(b, &c.Body)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

type frame struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
	S  *int            `json:"s"`
	T  *string         `json:"t"`
}

func (s *session) write(v any) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.conn.WriteJSON(v)
}

func (s *session) dispatch(t string, d any) error {
	s.wmu.Lock()
	s.seq++
	seq := s.seq
	s.wmu.Unlock()
	return s.write(map[string]any{"op": 0, "t": t, "s": seq, "d": d})
}

func (f *Fake) serveGateway(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		http.Error(w, "gateway unavailable", http.StatusServiceUnavailable)
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	s := &session{conn: conn, Session: Session{Opened: time.Now()}}
	if err := s.write(map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": 41250}}); err != nil {
		return
	}
	var id frame
	if err := conn.ReadJSON(&id); err != nil || id.Op != 2 {
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4003, "Not authenticated."))
		return
	}
	var ident struct {
		Token   string `json:"token"`
		Intents int    `json:"intents"`
	}
	_ = json.Unmarshal(id.D, &ident)
	if ident.Token != "Bot "+f.Token {
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4004, "Authentication failed."))
		return
	}
	s.Token, s.Intents = ident.Token, ident.Intents
	f.mu.Lock()
	f.sessions = append(f.sessions, s)
	sid := fmt.Sprintf("session-%d", len(f.sessions))
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		s.Closed = time.Now()
		f.changed()
		f.mu.Unlock()
	}()
	if err := s.dispatch("READY", map[string]any{"v": 10, "session_id": sid, "resume_gateway_url": "ws://" + r.Host + "/gateway",
		"user":   map[string]any{"id": f.BotID, "username": f.Name, "bot": true, "discriminator": "0"},
		"guilds": []any{}, "application": map[string]any{"id": f.BotID, "flags": 0}}); err != nil {
		return
	}
	f.mu.Lock()
	f.changed()
	f.mu.Unlock()
	for {
		var fr frame
		if err := conn.ReadJSON(&fr); err != nil {
			return
		}
		if fr.Op == 1 {
			_ = s.write(map[string]any{"op": 11})
		}
	}
}

// Intent bits the adapter must identify with (guild messages, direct messages, message content).
const (
	IntentGuildMessages  = 1 << 9
	IntentDirectMessages = 1 << 12
	IntentMessageContent = 1 << 15
)
