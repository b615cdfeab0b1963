package app_test

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
)

// A private message through the webhook is answered at the bot's callback: signed, threaded
// under the inbound message, with the model's text.
func TestWebhookToCallback(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{})
	pl.post(private("m1", "u1", "hello pipeline"))
	r := pl.replies(1)[0]
	if !r.SigOK {
		t.Error("callback signature does not verify with the bot's secret")
	}
	if r.ReplyTo != "m1" || r.Bot != botID || r.Scene.Type != "private" || r.Scene.ID != "u1" {
		t.Errorf("reply envelope = %+v", r.Outbound)
	}
	if got := r.Text(); got != "echo: hello pipeline" {
		t.Errorf("reply text = %q", got)
	}
	req := pl.requests(1)[0]
	if req.Model != "m1" || !req.Stream {
		t.Errorf("model request: model %q stream %v", req.Model, req.Stream)
	}
	if auth := req.Header.Get("Authorization"); auth != "Bearer test" {
		t.Errorf("Authorization = %q", auth)
	}
	if len(req.Messages) == 0 || req.Messages[0].Role != "system" || !strings.Contains(req.LastUser(), "hello pipeline") {
		t.Errorf("model request messages: %s", req.Text())
	}
	pl.settle(1)
}
