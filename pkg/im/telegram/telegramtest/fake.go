// Package telegramtest is a Telegram Bot API server for tests, speaking the Bot API's wire
// format: POST /bot<token>/<method> with form or multipart bodies, {"ok":...,"result":...}
// answers, getUpdates long polling with offsets confirmed by the next call (and 409 Conflict
// for a poll that another poll terminated, as Telegram does), the file API under
// /file/bot<token>/<path>, and flood control (429 with parameters.retry_after) on demand.
// It records every call. It fakes the remote platform only: the adapter talks to it over HTTP.
package telegramtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Call is one recorded API call.
type Call struct {
	Method string
	Params url.Values
	Files  map[string][]byte // multipart uploads by field name
	Time   time.Time
	Status int // the HTTP status answered
}

// Fake is the server.
type Fake struct {
	t      testing.TB
	Token  string
	BotID  int64
	Name   string // the bot's username
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []Call
	upd    []map[string]any // pending updates, each with update_id
	nextID int
	msgID  int
	files  map[string][]byte // file_path -> bytes
	fail   map[string][]int  // method -> statuses to answer next
	retry  int
	poll   chan struct{} // closed to terminate the poll in flight
	change chan struct{}
	// Polls counts getUpdates calls; Conflicts those terminated by a newer poll.
	Polls, Conflicts int
	// bans are the chats under flood control (a 429 answered to a call with a chat_id), until
	// when; Violations counts calls to a banned chat, which Telegram answers with a longer ban.
	bans       map[string]time.Time
	Violations int
}

// New starts the fake on loopback.
func New(t testing.TB, token string, botID int64, username string) *Fake {
	f := &Fake{t: t, Token: token, BotID: botID, Name: username, nextID: 100, msgID: 500,
		files: map[string][]byte{}, fail: map[string][]int{}, change: make(chan struct{}), bans: map[string]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{bottoken}/{method}", f.serveAPI)
	mux.HandleFunc("GET /file/{bottoken}/{path...}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("bottoken") != "bot"+f.Token {
			http.NotFound(w, r)
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
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// URL is the API base (apiBase).
func (f *Fake) URL() string { return f.srv.URL }

// AddFile makes a file downloadable; its file_id is "fid-<path>".
func (f *Fake) AddFile(path string, b []byte) string {
	f.mu.Lock()
	f.files[path] = b
	f.mu.Unlock()
	return "fid-" + path
}

// FailNext makes the next calls of method answer with statuses (429 carries retry_after, and
// bans the call's chat for that long: a call to it before then is answered 429 again, with a
// doubled retry_after, and counted in Violations).
func (f *Fake) FailNext(method string, retryAfter int, statuses ...int) {
	f.mu.Lock()
	f.fail[method] = append(f.fail[method], statuses...)
	f.retry = retryAfter
	f.mu.Unlock()
}

// AddMessage queues a message update and returns its update id.
func (f *Fake) AddMessage(msg map[string]any) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	f.upd = append(f.upd, map[string]any{"update_id": f.nextID, "message": msg})
	f.notifyLocked()
	return f.nextID
}

// AddCallbackQuery queues a callback_query update (a press of an inline keyboard button):
// id, the presser, the data, and the message the keyboard is on (nil: none, as for a message
// too old for Telegram to include). It returns the update id.
func (f *Fake) AddCallbackQuery(id string, from int64, data string, msg map[string]any) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	cq := map[string]any{"id": id, "from": map[string]any{"id": from, "is_bot": false, "first_name": "User" + strconv.FormatInt(from, 10)},
		"chat_instance": "ci", "data": data}
	if msg != nil {
		cq["message"] = msg
	}
	f.upd = append(f.upd, map[string]any{"update_id": f.nextID, "callback_query": cq})
	f.notifyLocked()
	return f.nextID
}

func (f *Fake) notifyLocked() {
	close(f.change)
	f.change = make(chan struct{})
}

func (f *Fake) answer(w http.ResponseWriter, status int, body map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func (f *Fake) serveAPI(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("bottoken") != "bot"+f.Token {
		f.answer(w, 401, map[string]any{"ok": false, "error_code": 401, "description": "Unauthorized"})
		return
	}
	method := r.PathValue("method")
	c := Call{Method: method, Time: time.Now(), Files: map[string][]byte{}}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
		if err := r.ParseMultipartForm(32 << 20); err == nil {
			c.Params = url.Values(r.MultipartForm.Value)
			for name, fhs := range r.MultipartForm.File {
				if len(fhs) > 0 {
					fh, _ := fhs[0].Open()
					b, _ := io.ReadAll(fh)
					fh.Close()
					c.Files[name] = b
				}
			}
		}
	} else {
		_ = r.ParseForm()
		c.Params = r.PostForm
	}
	f.mu.Lock()
	chat := c.Params.Get("chat_id")
	if until, ok := f.bans[chat]; ok && chat != "" && time.Now().Before(until) {
		// Sent to a chat before its ban is over: Telegram bans it for longer.
		f.Violations++
		ra := 2 * f.retry
		f.bans[chat] = time.Now().Add(time.Duration(ra) * time.Second)
		c.Status = 429
		f.calls = append(f.calls, c)
		f.notifyLocked()
		f.mu.Unlock()
		f.answer(w, 429, map[string]any{"ok": false, "error_code": 429, "description": "Too Many Requests: retry after " + strconv.Itoa(ra),
			"parameters": map[string]any{"retry_after": ra}})
		return
	}
	if st := f.fail[method]; len(st) > 0 {
		code := st[0]
		f.fail[method] = st[1:]
		c.Status = code
		f.calls = append(f.calls, c)
		f.notifyLocked()
		ra := f.retry
		if code == 429 && chat != "" {
			f.bans[chat] = time.Now().Add(time.Duration(ra) * time.Second)
		}
		f.mu.Unlock()
		body := map[string]any{"ok": false, "error_code": code, "description": http.StatusText(code)}
		if code == 429 {
			body["description"] = "Too Many Requests: retry after " + strconv.Itoa(ra)
			body["parameters"] = map[string]any{"retry_after": ra}
		}
		f.answer(w, code, body)
		return
	}
	f.mu.Unlock()
	if method == "getUpdates" {
		f.getUpdates(w, r, c)
		return
	}
	c.Status = 200
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.notifyLocked()
	result := f.resultLocked(c)
	f.mu.Unlock()
	if result == nil {
		f.answer(w, 400, map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: unknown method or parameters"})
		return
	}
	f.answer(w, 200, map[string]any{"ok": true, "result": result})
}

func (f *Fake) resultLocked(c Call) any {
	chat, _ := strconv.ParseInt(c.Params.Get("chat_id"), 10, 64)
	switch c.Method {
	case "getMe":
		return map[string]any{"id": f.BotID, "is_bot": true, "first_name": "Bot", "username": f.Name}
	case "sendMessage", "sendPhoto", "sendVoice", "sendDocument", "sendVideo", "sendAudio":
		f.msgID++
		return map[string]any{"message_id": f.msgID, "date": time.Now().Unix(), "chat": map[string]any{"id": chat, "type": "private"},
			"text": c.Params.Get("text")}
	case "editMessageText":
		id, _ := strconv.Atoi(c.Params.Get("message_id"))
		return map[string]any{"message_id": id, "date": time.Now().Unix(), "chat": map[string]any{"id": chat, "type": "private"}, "text": c.Params.Get("text")}
	case "sendChatAction", "deleteMessage", "setWebhook", "deleteWebhook", "answerCallbackQuery":
		return true
	case "getFile":
		id := c.Params.Get("file_id")
		path := strings.TrimPrefix(id, "fid-")
		if _, ok := f.files[path]; !ok {
			return nil
		}
		return map[string]any{"file_id": id, "file_unique_id": "u" + id, "file_size": len(f.files[path]), "file_path": path}
	}
	return nil
}

func (f *Fake) getUpdates(w http.ResponseWriter, r *http.Request, c Call) {
	offset, _ := strconv.Atoi(r.PostForm.Get("offset"))
	timeout, _ := strconv.Atoi(r.PostForm.Get("timeout"))
	f.mu.Lock()
	f.Polls++
	if f.poll != nil {
		close(f.poll) // "Conflict: terminated by other getUpdates request"
	}
	mine := make(chan struct{})
	f.poll = mine
	c.Status = 200
	f.calls = append(f.calls, c)
	f.notifyLocked()
	// Updates below the offset are confirmed: forget them.
	kept := f.upd[:0]
	for _, u := range f.upd {
		if offset == 0 || u["update_id"].(int) >= offset {
			kept = append(kept, u)
		}
	}
	f.upd = kept
	f.mu.Unlock()
	deadline := time.After(time.Duration(timeout) * time.Second)
	for {
		f.mu.Lock()
		pending := append([]map[string]any(nil), f.upd...)
		ch := f.change
		f.mu.Unlock()
		if len(pending) > 0 {
			f.endPoll(mine)
			f.answer(w, 200, map[string]any{"ok": true, "result": pending})
			return
		}
		select {
		case <-mine:
			f.mu.Lock()
			f.Conflicts++
			f.mu.Unlock()
			f.answer(w, 409, map[string]any{"ok": false, "error_code": 409, "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"})
			return
		case <-r.Context().Done():
			f.endPoll(mine)
			return
		case <-deadline:
			f.endPoll(mine)
			f.answer(w, 200, map[string]any{"ok": true, "result": []any{}})
			return
		case <-ch:
		}
	}
}

func (f *Fake) endPoll(mine chan struct{}) {
	f.mu.Lock()
	if f.poll == mine {
		f.poll = nil
	}
	f.mu.Unlock()
}

// FloodViolations is how many calls reached a chat during its flood-control ban.
func (f *Fake) FloodViolations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Violations
}

// Calls returns the calls so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// WaitCalls waits until keep accepts n calls and returns them.
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
			f.t.Fatalf("telegramtest: %d of %d calls within %v", len(got), n, timeout)
			return nil
		}
	}
}

// Message builds a message object: chat type private/group/supergroup, from user id.
func (f *Fake) Message(id int, chat int64, chatType string, from int64, text string) map[string]any {
	return map[string]any{"message_id": id, "date": time.Now().Unix(),
		"chat": map[string]any{"id": chat, "type": chatType, "title": "chat"},
		"from": map[string]any{"id": from, "is_bot": false, "first_name": "User" + strconv.FormatInt(from, 10)},
		"text": text}
}

// Mention adds a mention entity of @username at the start of msg's text.
func Mention(msg map[string]any, username string) map[string]any {
	text := "@" + username + " " + msg["text"].(string)
	msg["text"] = text
	msg["entities"] = []any{map[string]any{"type": "mention", "offset": 0, "length": len(username) + 1}}
	return msg
}
