package slack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/slack"
	"github.com/agentbus/agentbus/pkg/im/slack/slacktest"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestCardOnTheWire (issue 39): a card part is one chat.postMessage with blocks (a section,
// a fields section, an actions block) and the card's plain text as text; a press (a
// block_actions payload posted as a signed form to the Events API request URL, carrying the
// message's blocks as Slack does) is ingested as a message from the presser in the card's
// thread; a bad signature is refused, and a value that is no button of the message is dropped.
func TestCardOnTheWire(t *testing.T) {
	const secret = "shh"
	fake := slacktest.New(t, "xoxb-1", "xapp-1", "UBOT", "BBOT")
	bot := config.SlackBot{ID: "sl1", BotToken: "xoxb-1", Mode: slack.ModeEvents, SigningSecret: secret, APIBase: fake.URL()}
	s, err := slack.NewSender([]config.SlackBot{bot}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	card := events.Card{Title: "Deploy <!channel>?", Text: "Staging is green.",
		Fields:  []events.CardField{{Name: "env", Value: "prod & eu"}},
		Buttons: []events.CardButton{{Label: "Deploy", Value: "deploy v1.4"}, {Label: "Changelog", URL: "https://example.com/changes"}}}
	out := events.Outbound{OutID: "t1-1", Turn: "t1", Part: 1, Platform: slack.Platform, Bot: "sl1",
		Scene: events.Scene{Type: "group", ID: "C1"}, Content: events.Segments{events.CardSeg(card)}, Final: true}
	if _, err := s.Send(ctx, out); err != nil {
		t.Fatal(err)
	}
	sent := fake.WaitCalls(1, 10*time.Second, func(c slacktest.Call) bool { return c.Method == "chat.postMessage" })[0]
	var blocks []any
	if err := json.Unmarshal([]byte(sent.Params.Get("blocks")), &blocks); err != nil {
		t.Fatalf("blocks %q: %v", sent.Params.Get("blocks"), err)
	}
	want := []any{
		map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "*Deploy &lt;!channel&gt;?*\nStaging is green."}},
		map[string]any{"type": "section", "fields": []any{map[string]any{"type": "mrkdwn", "text": "*env*\nprod &amp; eu"}}},
		map[string]any{"type": "actions", "block_id": "ab-card", "elements": []any{
			map[string]any{"type": "button", "action_id": "ab:0", "value": "deploy v1.4", "text": map[string]any{"type": "plain_text", "text": "Deploy", "emoji": false}},
			map[string]any{"type": "button", "action_id": "ab:1", "url": "https://example.com/changes", "text": map[string]any{"type": "plain_text", "text": "Changelog", "emoji": false}},
		}},
	}
	if !reflect.DeepEqual(blocks, want) {
		got, _ := json.Marshal(blocks)
		t.Fatalf("blocks %s", got)
	}
	if txt := sent.Params.Get("text"); !strings.Contains(txt, "Deploy &lt;!channel&gt;?") || !strings.Contains(txt, "[Deploy]") {
		t.Fatalf("fallback text %q", txt)
	}

	var mu sync.Mutex
	var got []*events.IMMessage
	sink := im.SinkFunc(func(_ context.Context, m *events.IMMessage) error {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		return nil
	})
	in, err := slack.NewInbound(slack.InboundOptions{Bot: bot, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	slack.Routes(mux, map[string]*slack.Inbound{"sl1": in})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	interaction := func(actionID, value, actionTS string) map[string]any {
		return map[string]any{"type": "block_actions", "trigger_id": "tr-" + actionTS,
			"user":      map[string]any{"id": "U7", "username": "ann", "name": "Ann"},
			"channel":   map[string]any{"id": "C1", "name": "general"},
			"container": map[string]any{"type": "message", "channel_id": "C1", "message_ts": sent.TS, "is_ephemeral": false},
			"message":   map[string]any{"type": "message", "ts": sent.TS, "blocks": blocks},
			"actions": []any{map[string]any{"action_id": actionID, "block_id": "ab-card", "type": "button", "value": value,
				"text": map[string]any{"type": "plain_text", "text": "Deploy"}, "action_ts": actionTS}}}
	}
	press := func(actionID, value, actionTS string, sign string) int {
		payload, _ := json.Marshal(interaction(actionID, value, actionTS))
		body := []byte(url.Values{"payload": {string(payload)}}.Encode())
		ts, sig := slacktest.Sign(sign, body, time.Now())
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/slack/sl1", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, tc := range []struct {
		name                  string
		action, value, secret string
		status                int
	}{
		{"forged signature", "ab:0", "deploy v1.4", "wrong", 401},
		{"value not on the message", "ab:0", "rm -rf /", secret, 200},
		{"oversized value", "ab:0", strings.Repeat("x", 3000), secret, 200},
		{"the url button", "ab:1", "", secret, 200},
		{"the real press", "ab:0", "deploy v1.4", secret, 200},
	} {
		if st := press(tc.action, tc.value, "1700000000.00"+strconv.Itoa(i), tc.secret); st != tc.status {
			t.Fatalf("%s: status %d, want %d", tc.name, st, tc.status)
		}
	}
	mu.Lock()
	if len(got) != 1 {
		t.Fatalf("ingested %d presses, want 1: %+v", len(got), got)
	}
	m := got[0]
	mu.Unlock()
	if m.Sender.ID != "U7" || m.Sender.Name != "Ann" || m.Scene != (events.Scene{Type: "group", ID: "C1"}) || !m.MentionsBot ||
		m.MessageID != "C1/press:1700000000.004/"+sent.TS {
		t.Fatalf("press message %+v", m)
	}
	if txt := m.Content.PlainText(); txt != "[pressed button: Deploy] deploy v1.4" {
		t.Fatalf("press text %q", txt)
	}

	// Socket Mode: the press arrives in an "interactive" envelope, is ingested and acked; a
	// forged one is acked and dropped.
	nsrv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := nsrv.Connect(t)
	sbot := config.SlackBot{ID: "sl1", BotToken: "xoxb-1", AppToken: "xapp-1", APIBase: fake.URL()}
	sin, err := slack.NewInbound(slack.InboundOptions{Bot: sbot, Sink: sink, JS: js, Owner: "a", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sin.Run(rctx) }()
	defer func() { stop(); <-done }()
	fake.WaitSockets(1, 30*time.Second)
	forged := fake.PushInteractive(interaction("ab:0", "rm -rf /", "1700000001.000001"))
	real := fake.PushInteractive(interaction("ab:0", "deploy v1.4", "1700000001.000002"))
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(fake.Acked(forged) && fake.Acked(real), "interactive envelopes not acknowledged (forged %v, real %v)", fake.Acked(forged), fake.Acked(real))
	})
	mu.Lock()
	got2 := append([]*events.IMMessage(nil), got...)
	mu.Unlock()
	if got := got2; len(got) != 2 || got[1].Content.PlainText() != "[pressed button: Deploy] deploy v1.4" ||
		got[1].MessageID != "C1/press:1700000001.000002/"+sent.TS {
		t.Fatalf("socket mode presses %+v, want the real one only", got[1:])
	}

	// In a DM the answer is not threaded: the press's id has no thread part.
	dm := interaction("ab:0", "deploy v1.4", "1700000002.000001")
	dm["channel"] = map[string]any{"id": "D9"}
	dm["container"] = map[string]any{"type": "message", "channel_id": "D9", "message_ts": sent.TS}
	fake.PushInteractive(dm)
	testwait.Eventually(t, 0, func() error {
		mu.Lock()
		defer mu.Unlock()
		return testwait.Want(len(got) == 3, "the DM press was not ingested (%d messages)", len(got))
	})
	mu.Lock()
	m = got[2]
	mu.Unlock()
	if m := m; m.MessageID != "D9/press:1700000002.000001" || m.Scene.Type != events.ScopePrivate {
		t.Fatalf("DM press %+v", m)
	}
}
