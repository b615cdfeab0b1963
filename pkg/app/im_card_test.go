package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/im/telegram/telegramtest"
)

// TestTelegramCardPress runs a card through the pipeline (issue 39): the system prompt of a
// Telegram chat tells the model the card syntax; the model's ```card block reaches the Bot
// API as a sendMessage with an inline keyboard; pressing its value button (a callback_query)
// is answered and reaches the model as "[pressed button: <label>] <value>" from the presser,
// whose answer goes back to the chat; the same press delivered again is not a second turn.
func TestTelegramCardPress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	fake := telegramtest.New(t, tgToken, tgBotID, tgName)
	var mu sync.Mutex
	var systems, presses []string
	model := fakeopenai.New(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		last := r.LastUser()
		mu.Lock()
		defer mu.Unlock()
		if len(r.Messages) > 0 && r.Messages[0].Role == "system" {
			systems = append(systems, r.Messages[0].Content)
		}
		switch {
		case strings.Contains(last, "[pressed button:"):
			presses = append(presses, last)
			return fakeopenai.Reply{Text: "Deploying now."}
		case strings.Contains(last, "card"):
			return fakeopenai.Reply{Text: "Ready when you are.\n```card\n" +
				`{"title": "Deploy v1.4?", "fields": [{"name": "env", "value": "prod"}], "buttons": [{"label": "Deploy", "value": "deploy v1.4"}, {"label": "Docs", "url": "https://example.com/d"}]}` +
				"\n```"}
		}
		return fakeopenai.Echo(r)
	})
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  telegram:
    bots:
      - {id: tg1, token: "%[2]s", apiBase: "%[3]s", preview: "off"}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[4]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, tgToken, fake.URL(), model.BaseURL())
	startProc(t, yml, app.AllRoles)
	sends := func(n int) []telegramtest.Call {
		return fake.WaitCalls(n, 90*time.Second, func(c telegramtest.Call) bool {
			return c.Status == 200 && c.Method == "sendMessage" && c.Params.Get("chat_id") == "61"
		})
	}
	fake.AddMessage(fake.Message(1, 61, "private", 61, "show me a card"))
	got := sends(2) // the text before the card, then the card
	if got[0].Params.Get("text") != "Ready when you are." || got[0].Params.Get("reply_markup") != "" {
		t.Fatalf("first part %v", got[0].Params)
	}
	var markup map[string]any
	if err := json.Unmarshal([]byte(got[1].Params.Get("reply_markup")), &markup); err != nil {
		t.Fatalf("card part without an inline keyboard: %v", got[1].Params)
	}
	if kb := fmt.Sprint(markup["inline_keyboard"]); kb != "[[map[callback_data:deploy v1.4 text:Deploy]] [map[text:Docs url:https://example.com/d]]]" {
		t.Fatalf("inline keyboard %s", kb)
	}
	mu.Lock()
	if len(systems) == 0 || !strings.Contains(systems[0], "## Cards") || !strings.Contains(systems[0], "[pressed button: <label>] <value>") {
		t.Fatalf("the system prompt does not tell the model about cards:\n%v", systems)
	}
	mu.Unlock()

	// The press, as Telegram sends it: the card message with its keyboard; then once more
	// (a redelivery), which ingest drops as a duplicate.
	cardMsg := fake.Message(502, 61, "private", tgBotID, got[1].Params.Get("text"))
	cardMsg["reply_markup"] = markup
	fake.AddCallbackQuery("cq-1", 61, "deploy v1.4", cardMsg)
	answer := sends(3)[2]
	if answer.Params.Get("text") != "Deploying now." {
		t.Fatalf("answer to the press %v", answer.Params)
	}
	fake.WaitCalls(1, 30*time.Second, func(c telegramtest.Call) bool {
		return c.Method == "answerCallbackQuery" && c.Params.Get("callback_query_id") == "cq-1"
	})
	fake.AddCallbackQuery("cq-1", 61, "deploy v1.4", cardMsg)
	fake.WaitCalls(2, 30*time.Second, func(c telegramtest.Call) bool {
		return c.Method == "answerCallbackQuery" && c.Params.Get("callback_query_id") == "cq-1"
	})
	time.Sleep(2 * time.Second) // a second turn, if the duplicate started one, would have asked the model by now
	mu.Lock()
	defer mu.Unlock()
	if len(presses) != 1 || !strings.Contains(presses[0], "[pressed button: Deploy] deploy v1.4") {
		t.Fatalf("the model saw presses %q, want one", presses)
	}
}
