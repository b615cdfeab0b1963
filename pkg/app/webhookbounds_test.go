package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// TestWebhookBoundsThroughPipeline reproduces issue 36's webhook findings on `agentbus up`: a
// signed "time" of 1e18 ms (and a Standard Webhooks timestamp in ms) is refused, and an 8 MiB
// text — under maxBodyBytes, over the bus's max_payload — gets 413 stating the limit instead of
// 503 "retry later", with nothing reaching the model; an ordinary message still goes through.
func TestWebhookBoundsThroughPipeline(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{})
	mk := func(id, text string, ms int64) []byte {
		b, err := json.Marshal(webhook.Inbound{ID: id, Scene: webhook.Scene{Type: "private", ID: "u1"},
			Sender: webhook.Sender{ID: "u1"}, Content: []webhook.Segment{events.TextSeg(text)}, Time: ms})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := mk("t1", "replay me forever", 1e18)
	if code, body := pl.postRaw(botID, b, webhook.Sign(botSecret, b)); code != 401 {
		t.Errorf("time 1e18: %d %s, want 401", code, body)
	}
	b = mk("t2", "ms timestamp", time.Now().UnixMilli())
	h, err := webhook.SignStandard(botSecret, "wh-ms", time.Unix(time.Now().UnixMilli(), 0), b)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := pl.postStandard(b, h); code != 401 {
		t.Errorf("Standard Webhooks timestamp in ms: %d %s, want 401", code, body)
	}
	limit := pl.p.NC.MaxPayload()
	b = mk("t3", strings.Repeat("x", 8<<20-200), time.Now().UnixMilli())
	code, body := pl.postRaw(botID, b, webhook.Sign(botSecret, b))
	if code != 413 || !strings.Contains(body, strconv.FormatInt(limit, 10)) {
		t.Errorf("8 MiB text: %d %.200s, want 413 naming the limit %d", code, body, limit)
	}
	pl.post(private("t4", "u1", "small"))
	got := pl.replies(1)
	if got[0].Text() != "echo: small" {
		t.Fatalf("reply %q", got[0].Text())
	}
	if n := len(pl.model.Requests()); n != 1 {
		t.Errorf("%d model requests, want 1 (only the small message)", n)
	}
	if n := pl.streamMsgs(events.StreamDeadLetters); n == 0 {
		t.Error("the refused 8 MiB message left no dead letter")
	}
}

// postStandard posts body with Standard Webhooks headers h.
func (pl *pipeline) postStandard(body []byte, h http.Header) (int, string) {
	pl.t.Helper()
	req, err := http.NewRequest(http.MethodPost, pl.p.WebhookURL+"/webhook/"+botID, bytes.NewReader(body))
	if err != nil {
		pl.t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		pl.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
