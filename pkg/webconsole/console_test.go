package webconsole_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/webconsole"
)

// script1 is model fake/m1: it saves a profile entry with the user_profile tool when asked to
// remember something, and otherwise answers "m1: <the last user message>".
func script1(r *fakeopenai.Request) fakeopenai.Reply {
	if n := len(r.Messages); n > 0 && r.Messages[n-1].Role == "tool" {
		return fakeopenai.Reply{Text: "saved. the tool said: " + r.Messages[n-1].Content}
	}
	if strings.Contains(r.LastUser(), "remember") && r.HasTool("user_profile") {
		return fakeopenai.Reply{Text: "one moment", ToolCalls: []fakeopenai.ToolCall{{ID: "call_1", Name: "user_profile",
			Arguments: `{"action":"set","key":"city","value":"Paris"}`}}}
	}
	return fakeopenai.Reply{Text: "m1: " + r.LastUser()}
}

// script2 is model fake2/m2, the one forks run against.
func script2(r *fakeopenai.Request) fakeopenai.Reply {
	return fakeopenai.Reply{Text: "m2 answers: " + r.LastUser()}
}

func jarClient() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

// login opens /?token= and returns a client that holds the session cookie, and the page's CSRF
// token.
func login(t *testing.T, pl *pipeline) (*http.Client, string) {
	t.Helper()
	c := jarClient()
	code, body := pl.get(t, c, "/sessions?token="+testToken)
	if code != http.StatusOK {
		t.Fatalf("login: %d %s", code, body)
	}
	code, body = pl.get(t, c, "/deadletters")
	m := regexp.MustCompile(`name="csrf" content="([0-9a-f]+)"`).FindStringSubmatch(body)
	if code != http.StatusOK {
		t.Fatalf("deadletters: %d", code)
	}
	csrf := ""
	if m != nil {
		csrf = m[1]
	}
	return c, csrf
}

// Every page and API answers 401 without the token; a wrong token or a forged cookie is no
// better; ?token= sets an HttpOnly, SameSite=Strict cookie and leaves the URL; posts need the
// session's CSRF token and the same origin.
func TestEveryPageAndAPIAnswers401WithoutToken(t *testing.T) {
	pl := newPipeline(t, script1, script2, "")
	sk := url.PathEscape(key("u1").String())
	paths := []string{"/", "/sessions", "/sessions?q=u1&text=1", "/sessions/" + sk, "/sessions/" + sk + "/turns", "/sessions/" + sk + "/events",
		"/deadletters", "/config", "/api/overview", "/api/sessions", "/api/sessions/" + sk, "/api/deadletters", "/api/config", "/no/such/page"}
	posts := []string{"/sessions/" + sk + "/fork", "/deadletters/1/retry", "/deadletters/1/discard"}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range paths {
		for _, variant := range []struct {
			name string
			req  func() *http.Request
		}{
			{"no token", func() *http.Request { r, _ := http.NewRequest("GET", pl.url+p, nil); return r }},
			{"wrong token", func() *http.Request {
				sep := "?"
				if strings.Contains(p, "?") {
					sep = "&"
				}
				r, _ := http.NewRequest("GET", pl.url+p+sep+"token=console-test-token-0123456789abcdeX", nil)
				return r
			}},
			{"wrong bearer", func() *http.Request {
				r, _ := http.NewRequest("GET", pl.url+p, nil)
				r.Header.Set("Authorization", "Bearer nope")
				return r
			}},
			{"forged cookie", func() *http.Request {
				r, _ := http.NewRequest("GET", pl.url+p, nil)
				r.AddCookie(&http.Cookie{Name: "agentbus_console", Value: "00ff.deadbeef"})
				return r
			}},
		} {
			resp, err := noRedirect.Do(variant.req())
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s (%s): %d, want 401", p, variant.name, resp.StatusCode)
			}
			if strings.Contains(string(body), apiKey1) || strings.Contains(string(body), botSecret) {
				t.Errorf("GET %s (%s) shows a secret", p, variant.name)
			}
		}
	}
	for _, p := range posts {
		resp, err := noRedirect.PostForm(pl.url+p, url.Values{"turn": {"x"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without token: %d, want 401", p, resp.StatusCode)
		}
	}

	// ?token= logs in: a cookie, and a redirect to the URL without the token.
	resp, err := noRedirect.Get(pl.url + "/sessions?q=u1&token=" + testToken)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || strings.Contains(resp.Header.Get("Location"), "token") {
		t.Fatalf("login: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "agentbus_console" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || strings.Contains(cookie.Value, testToken) {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, not the token", cookie)
	}
	c, csrf := login(t, pl)
	for _, p := range paths[:len(paths)-1] {
		if strings.HasSuffix(p, "/events") {
			continue // a stream; TestBrowser watches it
		}
		if code, body := pl.get(t, c, p); code != http.StatusOK {
			t.Errorf("GET %s with the cookie: %d %.200s", p, code, body)
		}
	}
	if csrf == "" {
		t.Fatal("no CSRF token on the dead letters page")
	}
	// A bearer token works for the API.
	req, _ := http.NewRequest("GET", pl.url+"/api/overview", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("bearer: %v %v", resp, err)
	}
	// Posts: the cookie alone is not enough; another origin is refused even with the token.
	resp, err = c.PostForm(pl.url+"/deadletters/1/discard", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST without CSRF token: %d, want 403", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", pl.url+"/deadletters/1/discard", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST: %d, want 403", resp.StatusCode)
	}
	// With the CSRF token, same origin: the request reaches the handler (no such dead letter).
	resp, err = c.PostForm(pl.url+"/deadletters/1/discard", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST with CSRF token for a missing dead letter: %d, want 404", resp.StatusCode)
	}
}

// /config shows the effective configuration with every secret redacted.
func TestConfigIsRedacted(t *testing.T) {
	pl := newPipeline(t, script1, script2, "")
	c, _ := login(t, pl)
	for _, p := range []string{"/config", "/api/config"} {
		code, body := pl.get(t, c, p)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", p, code)
		}
		for _, secret := range []string{apiKey1, apiKey2, botSecret, testToken} {
			if strings.Contains(body, secret) {
				t.Errorf("%s shows the secret %q", p, secret)
			}
		}
		if !strings.Contains(body, webconsole.Redacted) || !strings.Contains(body, "openai-completions") {
			t.Errorf("%s does not look like the redacted configuration:\n%s", p, body)
		}
	}
}

// The session API: a tool call in the turn's chain with its result and worker, the replies'
// delivery state; a fork against fake2/m2 that runs on the turn workers, is never posted, and
// pairs with the original; a dead-lettered reply retried from the console.
func TestSessionForkAndDeadLetter(t *testing.T) {
	pl := newPipeline(t, script1, script2, "")
	pl.waitTool(t, "user_profile")
	c, csrf := login(t, pl)
	pl.post(t, "m1", "u1", "remember that I live in Paris")
	pl.cb.wait(t, 1)
	pl.post(t, "m2", "u1", "what is the weather")
	pl.cb.wait(t, 2)

	sk := url.PathEscape(key("u1").String())
	var conv apiConversation
	testwait.Eventually(t, 0, func() error {
		conv = pl.conversation(t, c, sk)
		return testwait.Want(len(conv.Turns) == 2 && conv.Turns[1].Status == "committed" && len(conv.Turns[1].Replies) > 0 && conv.Turns[1].Replies[0].State == "sent", "two committed turns with sent replies")
	})
	first := conv.Turns[0]
	var tool *apiTool
	for _, s := range first.Steps {
		if s.Tool != nil {
			tool = s.Tool
		}
	}
	if tool == nil || tool.Name != "user_profile" || !strings.Contains(tool.Args, "Paris") || !tool.Done || tool.Result == "" || tool.Worker == "" {
		t.Fatalf("first turn's tool call: %+v (steps %+v)", tool, first.Steps)
	}
	if len(first.Steps) != 3 || first.Steps[0].Model == nil || first.Steps[2].Model == nil || first.Steps[2].Model.StopReason != "stop" {
		t.Errorf("first turn's chain: %+v, want model call, tool call, model call", first.Steps)
	}
	// The tool turn wrote nothing to AGENT_EVENTS (issue 40: its step rode on the tool call,
	// its start on the closing commit): the console still shows its model and prompt.
	if first.Model != "fake/m1" || len(first.Inputs) != 1 || !strings.Contains(first.Inputs[0], "Paris") {
		t.Errorf("first turn's start: model %q, inputs %q", first.Model, first.Inputs)
	}
	if first.Replies[0].State != "sent" || !strings.HasPrefix(first.Replies[0].Text, "saved.") {
		t.Errorf("first turn's reply: %+v", first.Replies[0])
	}

	// Fork from the first turn against fake2/m2.
	noRedirect := &http.Client{Jar: c.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(pl.url+"/sessions/"+sk+"/fork", url.Values{"csrf": {csrf}, "turn": {first.ID}, "model": {"fake2/m2"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/sessions/fork:") {
		t.Fatalf("fork: %d %q %s", resp.StatusCode, loc, body)
	}
	forkPath := strings.TrimPrefix(loc, "/sessions/")
	var fork apiConversation
	testwait.Eventually(t, 0, func() error {
		fork = pl.conversation(t, c, forkPath)
		return testwait.Want(len(fork.Turns) == 2 && fork.Turns[1].Status == "committed", "the fork's two turns")
	})
	if fork.Compare == nil || len(fork.Compare.Rows) != 2 {
		t.Fatalf("comparison: %+v", fork.Compare)
	}
	for i, row := range fork.Compare.Rows {
		if row.Orig == nil || row.Fork == nil {
			t.Fatalf("row %d not paired: %+v", i, row)
		}
		if !strings.Contains(row.Fork.Model, "m2") || !strings.Contains(row.Orig.Model, "m1") {
			t.Errorf("row %d models: original %s, fork %s", i, row.Orig.Model, row.Fork.Model)
		}
		if len(row.Fork.Replies) == 0 || !strings.HasPrefix(row.Fork.Replies[0].Text, "m2 answers:") {
			t.Errorf("row %d fork answer: %+v", i, row.Fork.Replies)
		}
	}
	if n := len(pl.m2.Requests()); n != 2 {
		t.Errorf("fake2/m2 got %d requests, want 2 (one per replayed message)", n)
	}
	if got := pl.cb.wait(t, 2); len(got) != 2 {
		t.Errorf("the fork posted to the platform: %q", got)
	}

	// Fork again with another system prompt: the fork's model calls open with it, and the chat
	// and tool sections of the usual prompt follow.
	const persona = "You are Captain Lin, a terse ship's navigator."
	resp, err = noRedirect.PostForm(pl.url+"/sessions/"+sk+"/fork", url.Values{"csrf": {csrf}, "turn": {first.ID},
		"model": {"fake2/m2"}, "systemPrompt": {persona}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc2 := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc2 == loc {
		t.Fatalf("second fork: %d %q", resp.StatusCode, loc2)
	}
	reqs, err := pl.m2.WaitRequests(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs[2:] {
		if len(r.Messages) == 0 || r.Messages[0].Role != "system" || !strings.HasPrefix(r.Messages[0].Content, persona+"\n") ||
			!strings.Contains(r.Messages[0].Content, "## ") {
			t.Errorf("the persona fork's request %d does not open with the persona and keep the sections: %.300q", r.N, r.Messages)
		}
	}
	for _, r := range reqs[:2] {
		if len(r.Messages) > 0 && strings.Contains(r.Messages[0].Content, persona) {
			t.Errorf("the first fork's request %d has the second fork's persona", r.N)
		}
	}

	// A reply the platform rejects is dead-lettered; retry delivers it once the platform takes it.
	pl.cb.reject.Store(true)
	pl.post(t, "m3", "u1", "third message")
	var dls []webconsole.DeadLetter
	testwait.Eventually(t, 0, func() error {
		_, b := pl.get(t, c, "/api/deadletters")
		dls = nil
		_ = json.Unmarshal([]byte(b), &dls)
		return testwait.Want(len(dls) == 1, "%d dead letters, want 1", len(dls))
	})
	if dls[0].Role != "egress" || dls[0].Session != key("u1").String() {
		t.Errorf("dead letter: %+v", dls[0])
	}
	testwait.Eventually(t, 0, func() error {
		conv = pl.conversation(t, c, sk)
		return testwait.Want(len(conv.Turns) == 3 && len(conv.Turns[2].Replies) > 0 && conv.Turns[2].Replies[0].State == "dead-lettered", "the reply marked dead-lettered")
	})
	if !strings.Contains(conv.Turns[2].Replies[0].Reason, "400") && !strings.Contains(conv.Turns[2].Replies[0].Reason, "removed") {
		t.Errorf("dead-letter reason: %q", conv.Turns[2].Replies[0].Reason)
	}
	pl.cb.reject.Store(false)
	resp, err = noRedirect.PostForm(pl.url+"/deadletters/"+itoa(dls[0].Seq)+"/retry", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry: %d", resp.StatusCode)
	}
	if got := pl.cb.wait(t, 3); got[2] != "m1: third message" {
		t.Errorf("retried reply: %q; dead letter %+v", got, dls[0])
	}
	testwait.Eventually(t, 0, func() error {
		conv = pl.conversation(t, c, sk)
		return testwait.Want(conv.Turns[2].Replies[0].State == "sent", "the retried reply marked sent")
	})
	if !conv.Turns[2].Replies[0].Retried || len(conv.Turns[2].Replies) != 1 {
		t.Errorf("the retried reply: %+v, want one part, sent, marked retried", conv.Turns[2].Replies)
	}
	if _, b := pl.get(t, c, "/api/deadletters"); strings.TrimSpace(b) != "null" && strings.TrimSpace(b) != "[]" {
		t.Errorf("dead letters after retry: %s", b)
	}
	// The overview lists the role replicas from KV presence, and today's turns.
	var ov struct {
		TurnsToday int
		Replicas   []webconsole.Replica
	}
	_, b := pl.get(t, c, "/api/overview")
	if err := json.Unmarshal([]byte(b), &ov); err != nil {
		t.Fatal(err)
	}
	roles := map[string]bool{}
	for _, r := range ov.Replicas {
		if r.Host == "" || r.PID == 0 || r.Version == "" || r.Started.IsZero() {
			t.Errorf("replica %+v lacks host, pid, version or start", r)
		}
		roles[r.Role] = true
	}
	for _, role := range []string{"ingest", "turn-worker", "tool-worker", "egress"} {
		if !roles[role] {
			t.Errorf("overview lists no %s replica: %+v", role, ov.Replicas)
		}
	}
	if ov.TurnsToday < 5 {
		t.Errorf("overview: %d turns today, want at least 5", ov.TurnsToday)
	}
	// The sessions list has both, with turns and tokens; text search finds the session.
	_, b = pl.get(t, c, "/api/sessions?q=Paris&text=1")
	var sp webconsole.SessionPage
	if err := json.Unmarshal([]byte(b), &sp); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range sp.Rows {
		if r.Key == key("u1").String() {
			found = r.Totals.Turns == 3 && r.Totals.Input > 0
		}
	}
	if !found {
		t.Errorf("text search for Paris: %+v", sp.Rows)
	}
}

type apiConversation struct {
	Turns []struct {
		ID     string
		Status string
		Model  string
		Inputs []string
		Steps  []struct {
			Model *struct{ Model, StopReason, Text string }
			Tool  *apiTool
		}
		Replies []struct {
			State, Text, Reason string
			Retried             bool
		}
	}
	Compare *struct {
		Rows []struct {
			Input      string
			Orig, Fork *struct {
				Model   string
				Replies []struct{ Text string }
			}
		}
	}
}

type apiTool struct {
	Name, Args, Result, Worker string
	Done, IsError              bool
	DurationMs                 int64
}

func (pl *pipeline) conversation(t *testing.T, c *http.Client, path string) apiConversation {
	t.Helper()
	code, b := pl.get(t, c, "/api/sessions/"+path)
	var conv apiConversation
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(b), &conv); err != nil {
			t.Fatalf("decode: %v\n%.500s", err, b)
		}
	}
	return conv
}

func itoa(n uint64) string { return strconvFormat(n) }

var _ = context.Background
