// Package matrixtest is a Matrix homeserver for fast tests, speaking the client-server API's
// wire format for what a bot uses: whoami, filters, /sync long polling with since tokens,
// invites and joins, joined members, fetching an event, m.direct account data, sending events with transaction
// ids (a repeated transaction id answers the event it created, as the spec requires),
// redactions, typing, media upload and download (authenticated /_matrix/client/v1/media and
// legacy /_matrix/media/v3), and 429 M_LIMIT_EXCEEDED with retry_after_ms on demand. Every
// call is recorded. It fakes the remote homeserver only: the adapter talks to it over HTTP.
// The real-server test runs against Dendrite (package dendritetest).
package matrixtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ServerName is the fake's server name.
const ServerName = "fake.test"

// Call is one recorded API call.
type Call struct {
	Method string
	Path   string
	Room   string // the room of a room call
	Txn    string // the transaction id of a send
	Body   map[string]any
	Status int
	Time   time.Time
}

type entry struct {
	room   string
	invite bool
	evt    map[string]any
}

// Fake is the server.
type Fake struct {
	t     testing.TB
	Bot   string // the bot's user id
	Token string
	srv   *httptest.Server

	mu      sync.Mutex
	calls   []Call
	log     []entry                      // sync log: next_batch = its length
	members map[string]map[string]string // room -> joined user -> display name
	txns    map[string]string            // room/txn -> event id
	media   map[string][]byte            // media id -> bytes
	types   map[string]string            // media id -> content type
	direct  map[string]any
	fail    map[string][]int // action -> statuses to answer next
	retryMs int
	nextID  int
	changed chan struct{}
	// NoAuthMedia makes /_matrix/client/v1/media unknown (404 M_UNRECOGNIZED), like a server
	// older than Matrix 1.11.
	NoAuthMedia bool
}

// New starts the fake on loopback for bot (a user id on ServerName) with access token token.
func New(t testing.TB, bot, token string) *Fake {
	f := &Fake{t: t, Bot: bot, Token: token, members: map[string]map[string]string{}, txns: map[string]string{},
		media: map[string][]byte{}, types: map[string]string{}, fail: map[string][]int{}, changed: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// URL is the homeserver base URL.
func (f *Fake) URL() string { return f.srv.URL }

// FailNext makes the next n calls of action ("send", "sync", "typing", "upload", ...) answer
// status; 429 carries M_LIMIT_EXCEEDED with retry_after_ms = retryMs.
func (f *Fake) FailNext(action string, n, status, retryMs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.fail[action] = append(f.fail[action], status)
	}
	f.retryMs = retryMs
}

// Calls returns the recorded calls.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// WaitCalls waits until n recorded calls satisfy keep and returns them.
func (f *Fake) WaitCalls(n int, d time.Duration, keep func(Call) bool) []Call {
	f.t.Helper()
	deadline := time.Now().Add(d)
	for {
		var got []Call
		f.mu.Lock()
		for _, c := range f.calls {
			if keep(c) {
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
		case <-time.After(time.Until(deadline)):
			f.t.Fatalf("matrixtest: %d of %d calls after %v", len(got), n, d)
		}
	}
}

func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *Fake) eventID() string {
	f.nextID++
	return fmt.Sprintf("$ev%d", f.nextID)
}

// Join makes user (with a display name) a member of room, the bot included: a room the bot
// is in from the start.
func (f *Fake) Join(room, user, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.join(room, user, name)
}

func (f *Fake) join(room, user, name string) {
	if f.members[room] == nil {
		f.members[room] = map[string]string{}
	}
	f.members[room][user] = name
	f.log = append(f.log, entry{room: room, evt: map[string]any{"type": "m.room.member", "state_key": user, "sender": user,
		"event_id": f.eventID(), "origin_server_ts": time.Now().UnixMilli(), "content": map[string]any{"membership": "join", "displayname": name}}})
	f.notify()
}

// Invite invites the bot to room from inviter (already a member), is_direct as given.
func (f *Fake) Invite(room, inviter string, direct bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, entry{room: room, invite: true, evt: map[string]any{"type": "m.room.member", "state_key": f.Bot, "sender": inviter,
		"content": map[string]any{"membership": "invite", "is_direct": direct}}})
	f.notify()
}

// Message adds an m.room.message event with content from sender to room and returns its id.
func (f *Fake) Message(room, sender string, content map[string]any) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.eventID()
	f.log = append(f.log, entry{room: room, evt: map[string]any{"type": "m.room.message", "sender": sender, "event_id": id,
		"origin_server_ts": time.Now().UnixMilli(), "content": content}})
	f.notify()
	return id
}

// Text adds a plain text message.
func (f *Fake) Text(room, sender, body string) string {
	return f.Message(room, sender, map[string]any{"msgtype": "m.text", "body": body})
}

// AddMedia stores content as mxc://fake.test/<id> and returns that URI.
func (f *Fake) AddMedia(b []byte, contentType string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addMedia(b, contentType)
}

func (f *Fake) addMedia(b []byte, ct string) string {
	f.nextID++
	id := "m" + strconv.Itoa(f.nextID)
	f.media[id], f.types[id] = b, ct
	return "mxc://" + ServerName + "/" + id
}

// Media returns uploaded content by mxc URI.
func (f *Fake) Media(mxc string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.media[strings.TrimPrefix(mxc, "mxc://"+ServerName+"/")]
}

// Sent returns the bodies of the events the bot sent to room, in order (edits included).
func (f *Fake) Sent(room string) []map[string]any {
	var out []map[string]any
	for _, c := range f.Calls() {
		if c.Method == http.MethodPut && c.Room == room && strings.Contains(c.Path, "/send/") && c.Status == 200 {
			out = append(out, c.Body)
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func matrixErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"errcode": code, "error": msg})
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	c := Call{Method: r.Method, Path: r.URL.Path, Time: time.Now()}
	action := f.action(r.URL.Path, &c)
	if strings.Contains(r.Header.Get("Content-Type"), "json") {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		_ = json.Unmarshal(b, &c.Body)
	}
	record := func(status int) {
		c.Status = status
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.notify()
		f.mu.Unlock()
	}
	auth := r.Header.Get("Authorization") == "Bearer "+f.Token
	if !auth && action != "download-legacy" && action != "versions" {
		record(401)
		matrixErr(w, 401, "M_MISSING_TOKEN", "no or wrong access token")
		return
	}
	f.mu.Lock()
	if q := f.fail[action]; len(q) > 0 {
		status, retry := q[0], f.retryMs
		f.fail[action] = q[1:]
		f.mu.Unlock()
		record(status)
		if status == 429 {
			writeJSON(w, 429, map[string]any{"errcode": "M_LIMIT_EXCEEDED", "error": "Too many requests", "retry_after_ms": retry})
		} else {
			matrixErr(w, status, "M_UNKNOWN", "scripted failure")
		}
		return
	}
	f.mu.Unlock()
	status := f.handle(w, r, action, &c)
	record(status)
}

// action names the endpoint and fills c.Room / c.Txn.
func (f *Fake) action(p string, c *Call) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	switch {
	case strings.HasPrefix(p, "/_matrix/client/versions"):
		return "versions"
	case strings.HasPrefix(p, "/_matrix/client/v1/media/download/"):
		return "download"
	case strings.HasPrefix(p, "/_matrix/media/v3/download/"):
		return "download-legacy"
	case strings.HasPrefix(p, "/_matrix/media/v3/upload"):
		return "upload"
	case strings.HasSuffix(p, "/account/whoami"):
		return "whoami"
	case strings.HasSuffix(p, "/filter"):
		return "filter"
	case strings.HasSuffix(p, "/sync"):
		return "sync"
	case strings.Contains(p, "/account_data/"):
		return "accountData"
	case len(parts) >= 5 && parts[3] == "rooms":
		c.Room = parts[4]
		if len(parts) >= 6 {
			switch parts[5] {
			case "send":
				if len(parts) >= 8 {
					c.Txn = parts[7]
				}
				return "send"
			case "redact":
				if len(parts) >= 8 {
					c.Txn = parts[7]
				}
				return "redact"
			default:
				return parts[5] // join, joined_members, typing, event
			}
		}
	}
	return "unknown"
}

func (f *Fake) handle(w http.ResponseWriter, r *http.Request, action string, c *Call) int {
	switch action {
	case "versions":
		writeJSON(w, 200, map[string]any{"versions": []string{"v1.11"}})
	case "whoami":
		writeJSON(w, 200, map[string]any{"user_id": f.Bot, "device_id": "FAKEDEV"})
	case "filter":
		writeJSON(w, 200, map[string]any{"filter_id": "1"})
	case "accountData":
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.Method == http.MethodPut {
			f.direct = c.Body
			writeJSON(w, 200, map[string]any{})
			return 200
		}
		if f.direct == nil {
			matrixErr(w, 404, "M_NOT_FOUND", "no account data")
			return 404
		}
		writeJSON(w, 200, f.direct)
	case "sync":
		return f.sync(w, r)
	case "join":
		f.mu.Lock()
		f.join(c.Room, f.Bot, "Bot")
		f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"room_id": c.Room})
	case "joined_members":
		f.mu.Lock()
		joined := map[string]any{}
		for u, n := range f.members[c.Room] {
			joined[u] = map[string]any{"display_name": n}
		}
		f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"joined": joined})
	case "typing":
		writeJSON(w, 200, map[string]any{})
	case "event":
		parts := strings.Split(r.URL.Path, "/")
		want := parts[len(parts)-1]
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range f.log {
			if e.evt["event_id"] == want && e.room == c.Room {
				writeJSON(w, 200, e.evt)
				return 200
			}
		}
		matrixErr(w, 404, "M_NOT_FOUND", "no such event")
		return 404
	case "send", "redact":
		f.mu.Lock()
		key := c.Room + "/" + action + "/" + c.Txn
		id, ok := f.txns[key]
		if !ok {
			id = f.eventID()
			f.txns[key] = id
			if action == "send" {
				f.log = append(f.log, entry{room: c.Room, evt: map[string]any{"type": "m.room.message", "sender": f.Bot, "event_id": id,
					"origin_server_ts": time.Now().UnixMilli(), "content": c.Body}})
			}
		}
		f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"event_id": id})
	case "upload":
		b, _ := io.ReadAll(io.LimitReader(r.Body, 50<<20))
		f.mu.Lock()
		uri := f.addMedia(b, r.Header.Get("Content-Type"))
		f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"content_uri": uri})
	case "download", "download-legacy":
		if action == "download" && f.NoAuthMedia {
			matrixErr(w, 404, "M_UNRECOGNIZED", "Unrecognized request")
			return 404
		}
		parts := strings.Split(r.URL.Path, "/")
		mid := parts[len(parts)-1]
		f.mu.Lock()
		b, ok := f.media[mid]
		ct := f.types[mid]
		f.mu.Unlock()
		if !ok {
			matrixErr(w, 404, "M_NOT_FOUND", "no such media")
			return 404
		}
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(b)
	default:
		matrixErr(w, 404, "M_UNRECOGNIZED", "Unrecognized request")
		return 404
	}
	return 200
}

// sync answers /sync: everything after since (a position in the log), waiting up to
// timeout ms for something new.
func (f *Fake) sync(w http.ResponseWriter, r *http.Request) int {
	since := 0
	if q := r.URL.Query().Get("since"); q != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(q, "s"))
		if err != nil || !strings.HasPrefix(q, "s") {
			matrixErr(w, http.StatusBadRequest, "M_UNKNOWN_POS", "unknown since token")
			return http.StatusBadRequest
		}
		since = n
	}
	timeout, _ := strconv.Atoi(r.URL.Query().Get("timeout"))
	deadline := time.Now().Add(time.Duration(timeout) * time.Millisecond)
	for {
		f.mu.Lock()
		n := len(f.log)
		ch := f.changed
		if n > since || time.Now().After(deadline) {
			batch := f.log[min(since, n):]
			f.mu.Unlock()
			writeJSON(w, 200, syncBody(batch, n))
			return 200
		}
		f.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		case <-r.Context().Done():
			return 499
		}
	}
}

func syncBody(batch []entry, next int) map[string]any {
	join := map[string]any{}
	invite := map[string]any{}
	for _, e := range batch {
		if e.invite {
			invite[e.room] = map[string]any{"invite_state": map[string]any{"events": []any{e.evt}}}
			continue
		}
		room, _ := join[e.room].(map[string]any)
		if room == nil {
			room = map[string]any{"timeline": map[string]any{"events": []any{}}}
			join[e.room] = room
		}
		tl := room["timeline"].(map[string]any)
		tl["events"] = append(tl["events"].([]any), e.evt)
	}
	return map[string]any{"next_batch": "s" + strconv.Itoa(next), "rooms": map[string]any{"join": join, "invite": invite}}
}
