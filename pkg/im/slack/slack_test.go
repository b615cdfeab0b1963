package slack

import (
	"errors"
	"strings"
	"testing"
	"time"

	slackapi "github.com/slack-go/slack"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

func TestTextSegments(t *testing.T) {
	self := &identity{user: "UBOT"}
	tests := []struct {
		name, text, want string
		mention          bool
	}{
		{"plain, entities undone", "a &lt;b&gt; &amp; c", "text(a <b> & c)", false},
		{"own mention stripped", "<@UBOT> hi", "text(hi)", true},
		{"own mention with label", "<@UBOT|agentbus> hi", "text(hi)", true},
		{"own mention later", "hey <@UBOT> you", "text(hey )|text( you)", true},
		{"other user", "ask <@U55|bob> now", "text(ask )|at(U55:bob)|text( now)", false},
		{"enterprise user", "<@W77>", "at(W77:)", false},
		{"channel link stays text", "see <#C1|general>", "text(see <#C1|general>)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			segs, mention := textSegments(tt.text, self)
			var parts []string
			for _, s := range segs {
				if s.Type == events.SegAt {
					parts = append(parts, "at("+s.MentionID()+":"+s.Str("name")+")")
				} else {
					parts = append(parts, "text("+s.Str("text")+")")
				}
			}
			if got := strings.Join(parts, "|"); got != tt.want || mention != tt.mention {
				t.Fatalf("got %s mention=%v, want %s mention=%v", got, mention, tt.want, tt.mention)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		perm  bool
		retry time.Duration
	}{
		{"429", &slackapi.RateLimitedError{RetryAfter: 3 * time.Second}, false, 3 * time.Second},
		{"channel_not_found", slackapi.SlackErrorResponse{Err: "channel_not_found"}, true, 0},
		{"internal_error", slackapi.SlackErrorResponse{Err: "internal_error"}, false, 0},
		{"503", slackapi.StatusCodeError{Code: 503, Status: "503 Service Unavailable"}, false, 0},
		{"404", slackapi.StatusCodeError{Code: 404, Status: "404 Not Found"}, true, 0},
		{"transport", errors.New("dial tcp: refused"), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify("chat.postMessage", tt.err)
			var e *im.Error
			got := time.Duration(0)
			if errors.As(err, &e) {
				got = e.RetryAfter
			}
			if im.IsPermanent(err) != tt.perm || got != tt.retry {
				t.Fatalf("%v: permanent=%v retry=%v", err, im.IsPermanent(err), got)
			}
		})
	}
}

func TestThreads(t *testing.T) {
	tests := []struct {
		scope, replyTo, want string
	}{
		{events.ScopeGroup, MessageID("C1", "1.1", ""), "1.1"},
		{events.ScopeGroup, MessageID("C1", "1.2", "1.1"), "1.1"},
		{events.ScopePrivate, MessageID("D1", "1.1", ""), ""},
		{events.ScopePrivate, MessageID("D1", "1.2", "1.1"), "1.1"},
		{events.ScopeGroup, "", ""},
		{events.ScopeGroup, MessageID("C1", "1.1", "1.1"), "1.1"}, // a thread's root message
	}
	for _, tt := range tests {
		if got := threadFor(tt.scope, tt.replyTo); got != tt.want {
			t.Errorf("threadFor(%s, %s) = %q, want %q", tt.scope, tt.replyTo, got, tt.want)
		}
	}
}

func TestPlan(t *testing.T) {
	content := events.Segments{events.AtSeg("U5", "bob"), events.TextSeg("<!channel> a & b " + strings.Repeat("word ", 1000)), events.ImageSeg("media://x")}
	msgs := plan(content, DefaultChunkLimit)
	if len(msgs) != 3 || msgs[2].Media.MediaRef() != "media://x" {
		t.Fatalf("%d messages: %+v", len(msgs), msgs)
	}
	if !strings.HasPrefix(msgs[0].Text, "<@U5> &lt;!channel&gt; a &amp; b word") {
		t.Fatalf("first message %.60q: mention kept, model text escaped", msgs[0].Text)
	}
	for _, m := range msgs[:2] {
		if n := len([]rune(m.Text)); n > DefaultChunkLimit+100 {
			t.Fatalf("message of %d characters", n)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		b  config.SlackBot
		ok bool
	}{
		{config.SlackBot{ID: "a", BotToken: "xoxb", AppToken: "xapp"}, true},
		{config.SlackBot{ID: "a", BotToken: "xoxb"}, false}, // socket mode without app token
		{config.SlackBot{ID: "a", BotToken: "xoxb", Mode: ModeEvents, SigningSecret: "s"}, true},
		{config.SlackBot{ID: "a", BotToken: "xoxb", Mode: ModeEvents}, false},
		{config.SlackBot{ID: "a", AppToken: "xapp"}, false},
		{config.SlackBot{ID: "a/b", BotToken: "xoxb", AppToken: "xapp"}, false},
		{config.SlackBot{ID: "a", BotToken: "xoxb", AppToken: "xapp", Mode: "rtm"}, false},
		{config.SlackBot{ID: "a", BotToken: "xoxb", AppToken: "xapp", Preview: "all"}, false},
	}
	for _, tt := range tests {
		if err := Validate(tt.b); (err == nil) != tt.ok {
			t.Errorf("%+v: %v", tt.b, err)
		}
	}
}
