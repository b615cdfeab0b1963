package onebot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbus/agentbus/pkg/im"
)

// Platform is the platform name in session keys.
const Platform = "onebot"

// maxFrame caps one WebSocket frame (an event with a long message, or an API answer).
const maxFrame = 8 << 20

// caller makes OneBot API calls: over a WebSocket (wsConn), over HTTP (httpAPI), or relayed to
// the ingest replica that holds the WebSocket (rpcCaller).
// idem is the call's ledger key (only the relay uses it: see rpcRequest.Idem).
type caller interface {
	call(ctx context.Context, action string, params any, idem string) (json.RawMessage, error)
}

// wsConn is one WebSocket to the implementation, in either direction: events come in, API
// calls go out with an echo and are matched with their answers.
type wsConn struct {
	c    *websocket.Conn
	seq  atomic.Uint64
	mu   sync.Mutex
	wait map[string]chan response
	done chan struct{}
	err  error
}

func newWSConn(c *websocket.Conn) *wsConn {
	c.SetReadLimit(maxFrame)
	return &wsConn{c: c, wait: map[string]chan response{}, done: make(chan struct{})}
}

// readLoop reads frames until the connection ends, answering calls and passing everything
// else to onEvent (in order, on this goroutine).
func (w *wsConn) readLoop(ctx context.Context, onEvent func([]byte)) error {
	defer close(w.done)
	for {
		_, b, err := w.c.Read(ctx)
		if err != nil {
			w.err = err
			return err
		}
		if w.answer(b) {
			continue
		}
		onEvent(b)
	}
}

// answer delivers b to the call waiting for its echo; false when b is not an answer.
func (w *wsConn) answer(b []byte) bool {
	if !bytes.Contains(b, []byte(`"echo"`)) {
		return false
	}
	// An event has a top-level post_type; an answer may hold events in its data (the
	// history actions), so only the top level decides.
	var r struct {
		response
		PostType string `json:"post_type"`
	}
	if json.Unmarshal(b, &r) != nil || len(r.Echo) == 0 || r.PostType != "" {
		return false
	}
	var echo string
	if json.Unmarshal(r.Echo, &echo) != nil {
		echo = string(r.Echo)
	}
	w.mu.Lock()
	ch, ok := w.wait[echo]
	delete(w.wait, echo)
	w.mu.Unlock()
	if ok {
		ch <- r.response
	}
	return true
}

func (w *wsConn) call(ctx context.Context, action string, params any, _ ...string) (json.RawMessage, error) {
	echo := "ab-" + strconv.FormatUint(w.seq.Add(1), 10)
	b, err := json.Marshal(request{Action: action, Params: params, Echo: echo})
	if err != nil {
		return nil, im.Permanent(fmt.Errorf("onebot %s: encode: %w", action, err))
	}
	ch := make(chan response, 1)
	w.mu.Lock()
	w.wait[echo] = ch
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.wait, echo)
		w.mu.Unlock()
	}()
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, fmt.Errorf("onebot %s: %w: %v", action, im.ErrClosed, err)
	}
	select {
	case r := <-ch:
		return result(action, r)
	case <-w.done:
		return nil, fmt.Errorf("onebot %s: %w", action, im.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("onebot %s: %w", action, ctx.Err())
	}
}

// result turns an answer into data or an *im.Error. OneBot's retcodes: 1400 bad request,
// 1401 unauthorized, 1403 forbidden, 1404 unsupported action are permanent; 100 (bad
// parameters in many implementations) too; everything else (1200 failed to send, timeouts)
// is retried.
func result(action string, r response) (json.RawMessage, error) {
	if r.Retcode == 0 && (r.Status == "ok" || r.Status == "async" || r.Status == "") {
		return r.Data, nil
	}
	msg := r.Wording
	if msg == "" {
		msg = r.Msg
	}
	if msg == "" {
		msg = r.Status
	}
	e := &im.Error{Platform: Platform, Action: action, Code: r.Retcode, Msg: msg}
	switch r.Retcode {
	case 100, 1400, 1401, 1403, 1404:
		e.Perm = true
	}
	return nil, e
}

// httpAPI calls the implementation's HTTP API: POST <apiBase>/<action> with a JSON body.
type httpAPI struct {
	base   string
	token  string
	client *http.Client
}

func (h *httpAPI) call(ctx context.Context, action string, params any, _ string) (json.RawMessage, error) {
	b, err := json.Marshal(params)
	if err != nil {
		return nil, im.Permanent(fmt.Errorf("onebot %s: encode: %w", action, err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(h.base, "/")+"/"+action, bytes.NewReader(b))
	if err != nil {
		return nil, im.Permanent(fmt.Errorf("onebot %s: %w", action, err))
	}
	req.Header.Set("Content-Type", "application/json")
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("onebot %s: %w", action, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxFrame))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, im.HTTPError(Platform, action, resp, body)
	}
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("onebot %s: answer is not JSON: %w", action, err)
	}
	return result(action, r)
}

// dial opens a forward WebSocket to apiBase with the access token.
func dial(ctx context.Context, apiBase, token string) (*websocket.Conn, error) {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(dctx, apiBase, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("onebot: dial %s: HTTP %d: %w", redact(apiBase), resp.StatusCode, err)
		}
		return nil, fmt.Errorf("onebot: dial %s: %w", redact(apiBase), err)
	}
	return c, nil
}

// redact drops a URL's query (implementations accept ?access_token=...).
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?..."
	}
	return u
}
