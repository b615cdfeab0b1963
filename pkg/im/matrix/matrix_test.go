package matrix

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

const self = id.UserID("@bot:example.org")

func segString(segs events.Segments) string {
	var parts []string
	for _, s := range segs {
		if s.Type == events.SegAt {
			parts = append(parts, "at("+s.MentionID()+"|"+s.Str("name")+")")
		} else {
			parts = append(parts, "text("+s.Str("text")+")")
		}
	}
	return strings.Join(parts, "")
}

func TestTextSegments(t *testing.T) {
	pill := `<a href="https://matrix.to/#/@bot:example.org">Bot</a>`
	tests := []struct {
		name  string
		msg   event.MessageEventContent
		reply bool
		want  string
		pill  bool
	}{
		{"plain", event.MessageEventContent{Body: "hello"}, false, "text(hello)", false},
		{"pill to the bot", event.MessageEventContent{Body: "Bot: hi", Format: event.FormatHTML, FormattedBody: pill + ": hi"}, false,
			"at(@bot:example.org|Bot)text(: hi)", true},
		{"pill to someone else", event.MessageEventContent{Body: "Ann hi", Format: event.FormatHTML,
			FormattedBody: `hi <a href="https://matrix.to/#/@ann:example.org">Ann</a>!`}, false, "text(hi )at(@ann:example.org|Ann)text(!)", false},
		{"html reply fallback dropped", event.MessageEventContent{Body: "> <@ann:x> old\n\nnew", Format: event.FormatHTML,
			FormattedBody: "<mx-reply><blockquote>old</blockquote></mx-reply>new <b>bold</b>"}, true, "text(new **bold**)", false},
		{"text reply fallback dropped", event.MessageEventContent{Body: "> <@ann:x> old\n> more\n\nnew"}, true, "text(new)", false},
		{"no fallback without a reply", event.MessageEventContent{Body: "> quoted\n\ntext"}, false, "text(> quoted\n\ntext)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			segs, p := textSegments(&tt.msg, tt.reply, self)
			if got := segString(segs); got != tt.want || p != tt.pill {
				t.Fatalf("got %q pill=%v, want %q pill=%v", got, p, tt.want, tt.pill)
			}
		})
	}
}

func TestMentions(t *testing.T) {
	tests := []struct {
		name string
		msg  event.MessageEventContent
		pill bool
		want bool
	}{
		{"m.mentions names the bot", event.MessageEventContent{Body: "hi", Mentions: &event.Mentions{UserIDs: []id.UserID{self}}}, false, true},
		{"m.mentions without the bot wins over the body", event.MessageEventContent{Body: "Bot hi", Mentions: &event.Mentions{}}, true, false},
		{"old client: pill", event.MessageEventContent{Body: "Bot: hi"}, true, true},
		{"old client: user id in body", event.MessageEventContent{Body: "@bot:example.org hi"}, false, true},
		{"old client: display name in body", event.MessageEventContent{Body: "hey BOT, hi"}, false, true},
		{"old client: nothing", event.MessageEventContent{Body: "hi all"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mentions(&tt.msg, tt.pill, self, "Bot"); got != tt.want {
				t.Fatalf("mentions = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	herr := func(status int, code string, extra map[string]any, header http.Header) error {
		if header == nil {
			header = http.Header{}
		}
		he := mautrix.HTTPError{Response: &http.Response{StatusCode: status, Header: header}}
		if code != "" {
			he.RespError = &mautrix.RespError{ErrCode: code, Err: "x", ExtraData: extra, StatusCode: status}
		}
		return he
	}
	tests := []struct {
		name  string
		err   error
		perm  bool
		retry time.Duration
	}{
		{"429 retry_after_ms", herr(429, "M_LIMIT_EXCEEDED", map[string]any{"retry_after_ms": 1500.0}, nil), false, 1500 * time.Millisecond},
		{"429 Retry-After header", herr(429, "M_LIMIT_EXCEEDED", nil, http.Header{"Retry-After": {"2"}}), false, 2 * time.Second},
		{"403 forbidden", herr(403, "M_FORBIDDEN", nil, nil), true, 0},
		{"401 unknown token", herr(401, "M_UNKNOWN_TOKEN", nil, nil), true, 0},
		{"502 without errcode", herr(502, "", nil, nil), false, 0},
		{"network", errors.New("dial tcp: connection refused"), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify("send", tt.err)
			var e *im.Error
			if im.IsPermanent(err) != tt.perm || (errors.As(err, &e) && e.RetryAfter != tt.retry) {
				t.Fatalf("%v: permanent=%v", err, im.IsPermanent(err))
			}
		})
	}
}

func TestTextContent(t *testing.T) {
	tests := []struct {
		name     string
		content  events.Segments
		body     string
		html     string // substring of formatted_body; "" = no formatted body
		mentions []id.UserID
	}{
		{"plain", events.Segments{events.TextSeg("just text")}, "just text", "", nil},
		{"markdown", events.Segments{events.TextSeg("**bold** and `code`")}, "**bold** and `code`", "<strong>bold</strong> and <code>code</code>", nil},
		{"raw html escaped", events.Segments{events.TextSeg("a <script>x</script> **b**")}, "a <script>x</script> **b**", "&lt;script&gt;", nil},
		{"at becomes a pill", events.Segments{events.AtSeg("@ann:example.org", "Ann"), events.TextSeg("look")}, "Ann look",
			`<a href="https://matrix.to/#/@ann:example.org">Ann</a>`, []id.UserID{"@ann:example.org"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := plan(tt.content, DefaultChunkLimit)
			if len(msgs) != 1 {
				t.Fatalf("%d messages", len(msgs))
			}
			c := textContent(msgs[0])
			if c.Body != tt.body {
				t.Errorf("body %q, want %q", c.Body, tt.body)
			}
			if tt.html == "" && c.FormattedBody != "" || !strings.Contains(c.FormattedBody, tt.html) {
				t.Errorf("formatted_body %q, want it to hold %q", c.FormattedBody, tt.html)
			}
			if strings.Contains(c.FormattedBody, "<script>") {
				t.Errorf("raw HTML passed through: %q", c.FormattedBody)
			}
			if len(c.Mentions.UserIDs) != len(tt.mentions) || (len(tt.mentions) > 0 && c.Mentions.UserIDs[0] != tt.mentions[0]) {
				t.Errorf("m.mentions %v, want %v", c.Mentions.UserIDs, tt.mentions)
			}
		})
	}
}

func TestPlanChunksAndMedia(t *testing.T) {
	long := strings.Repeat("Word after word. ", 60) // 1020 characters
	msgs := plan(events.Segments{events.TextSeg(long), events.ImageSeg("media://x")}, 300)
	if len(msgs) < 4 || msgs[len(msgs)-1].media.Type != events.SegImage {
		t.Fatalf("%d messages, last %+v", len(msgs), msgs[len(msgs)-1])
	}
	for _, m := range msgs[:len(msgs)-1] {
		if n := len([]rune(m.plain)); n > 300 || n == 0 {
			t.Fatalf("message of %d characters", n)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := config.MatrixBot{ID: "m1", Homeserver: "https://matrix.example.org", UserID: "@bot:example.org", AccessToken: "t"}
	tests := []struct {
		name string
		mod  func(*config.MatrixBot)
		err  string
	}{
		{"ok", func(*config.MatrixBot) {}, ""},
		{"bad id", func(b *config.MatrixBot) { b.ID = "a:b" }, "must not contain"},
		{"no token", func(b *config.MatrixBot) { b.AccessToken = "" }, "no accessToken"},
		{"bad user", func(b *config.MatrixBot) { b.UserID = "bot" }, "userId"},
		{"bad homeserver", func(b *config.MatrixBot) { b.Homeserver = "matrix.example.org" }, "not an http(s) URL"},
		{"bad preview", func(b *config.MatrixBot) { b.Preview = "full" }, "preview"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ok
			tt.mod(&b)
			err := Validate(b)
			if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("Validate = %v, want %q", err, tt.err)
			}
		})
	}
}

func TestTxnIDStable(t *testing.T) {
	a, b := txnID("send", "turn-0", 1), txnID("send", "turn-0", 1)
	if a != b || a == txnID("send", "turn-0", 2) || a == txnID("edit", "turn-0", 1) {
		t.Fatal("transaction ids must be stable per out id and index, and differ otherwise")
	}
}

// TestSinceStoreFenced: the since token is written by compare-and-set, so a replica that read
// it before another replica wrote cannot move it back.
func TestSinceStoreFenced(t *testing.T) {
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	ctx := context.Background()
	a, err := openSince(ctx, js, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := a.load(ctx); err != nil || s != "" {
		t.Fatalf("fresh load = %q, %v", s, err)
	}
	if err := a.save(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	b, _ := openSince(ctx, js, "m1")
	if s, err := b.load(ctx); err != nil || s != "s1" {
		t.Fatalf("takeover load = %q, %v", s, err)
	}
	if err := b.save(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if err := a.save(ctx, "s1b"); !errors.Is(err, ErrTokenMoved) {
		t.Fatalf("stale holder's save = %v, want ErrTokenMoved", err)
	}
	c, _ := openSince(ctx, js, "m1")
	if s, _ := c.load(ctx); s != "s2" {
		t.Fatalf("token = %q, want s2", s)
	}
}
