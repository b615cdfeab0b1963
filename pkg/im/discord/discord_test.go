package discord

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

func TestTextSegments(t *testing.T) {
	self := &discordgo.User{ID: "9"}
	tests := []struct {
		name, text, want string
		mention          bool
	}{
		{"plain", "hello", "text(hello)", false},
		{"own mention stripped", "<@9> hi there", "text(hi there)", true},
		{"own nick mention stripped", "<@!9> hi", "text(hi)", true},
		{"own mention in the middle", "hey <@9> you", "text(hey )|text(you)", true},
		{"other user", "ask <@5> please", "text(ask )|at(5:bob)|text( please)", false},
		{"role and channel mentions stay text", "<@&7> in <#8>", "text(<@&7> in <#8>)", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			segs, mention := textSegments(tt.text, self, map[string]string{"5": "bob"})
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
	resp := func(code int, h http.Header) *http.Response { return &http.Response{StatusCode: code, Header: h} }
	tests := []struct {
		name  string
		err   error
		perm  bool
		retry time.Duration
	}{
		{"429", &discordgo.RateLimitError{RateLimit: &discordgo.RateLimit{TooManyRequests: &discordgo.TooManyRequests{RetryAfter: 2500 * time.Millisecond}}}, false, 2500 * time.Millisecond},
		{"403 missing access", &discordgo.RESTError{Response: resp(403, http.Header{}), Message: &discordgo.APIErrorMessage{Code: 50001, Message: "Missing Access"}}, true, 0},
		{"404 unknown channel", &discordgo.RESTError{Response: resp(404, http.Header{}), Message: &discordgo.APIErrorMessage{Code: 10003, Message: "Unknown Channel"}}, true, 0},
		{"503", &discordgo.RESTError{Response: resp(503, http.Header{"Retry-After": {"3"}})}, false, 3 * time.Second},
		{"transport", errors.New("dial tcp: connection refused"), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify("createMessage", tt.err)
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

// TestRebase: the library's https://discord.com requests reach apiBase (with a path
// prefix kept), other hosts are untouched, and gatewayUrl answers GET /gateway.
func TestRebase(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, `{"id":"1","channel_id":"2"}`)
	}))
	defer srv.Close()
	s, err := newSession(config.DiscordBot{ID: "b", Token: "tok", APIBase: srv.URL + "/proxy/", GatewayURL: "ws://gw.example/x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ChannelMessageSend("2", "hi"); err != nil {
		t.Fatal(err)
	}
	gw, err := s.Gateway()
	if err != nil || strings.TrimSuffix(gw, "/") != "ws://gw.example/x" { // the library adds a slash
		t.Fatalf("gateway %q %v", gw, err)
	}
	want := "POST /proxy/api/v" + discordgo.APIVersion + "/channels/2/messages Bot tok"
	if len(paths) != 1 || paths[0] != want {
		t.Fatalf("requests %q, want [%q]", paths, want)
	}
}

func TestPlan(t *testing.T) {
	long := strings.Repeat("word ", 900) // 4,500 characters
	content := events.Segments{events.AtSeg("5", "bob"), events.TextSeg("look: " + long), events.ImageSeg("media://x/y")}
	msgs := plan(content, DefaultChunkLimit)
	var texts, media int
	for _, m := range msgs {
		if m.Text != "" {
			texts++
			if n := len([]rune(m.Text)); n > DefaultChunkLimit {
				t.Fatalf("message of %d characters", n)
			}
		} else {
			media++
		}
	}
	if texts != 3 || media != 1 || !strings.HasPrefix(msgs[0].Text, "<@5> look:") {
		t.Fatalf("%d text and %d media messages; first %.20q", texts, media, msgs[0].Text)
	}
	if !bytes.Equal([]byte(msgs[len(msgs)-1].Media.MediaRef()), []byte("media://x/y")) {
		t.Fatalf("media last: %+v", msgs[len(msgs)-1])
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		b  config.DiscordBot
		ok bool
	}{
		{config.DiscordBot{ID: "a", Token: "t"}, true},
		{config.DiscordBot{ID: "", Token: "t"}, false},
		{config.DiscordBot{ID: "a:b", Token: "t"}, false},
		{config.DiscordBot{ID: "a"}, false},
		{config.DiscordBot{ID: "a", Token: "t", Preview: "always"}, false},
		{config.DiscordBot{ID: "a", Token: "t", APIBase: "not a url"}, false},
	}
	for _, tt := range tests {
		if err := Validate(tt.b); (err == nil) != tt.ok {
			t.Errorf("%+v: %v", tt.b, err)
		}
	}
}
