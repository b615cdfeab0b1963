package telegram

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/agentbus/agentbus/pkg/im"
)

func TestHTML(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"a < b & c > d", "a &lt; b &amp; c &gt; d"},
		{"**bold** and *it* and _it_ and ~~s~~", "<b>bold</b> and <i>it</i> and <i>it</i> and <s>s</s>"},
		{"`<code> **x**`", "<code>&lt;code&gt; **x**</code>"},
		{"```go\nif a<b {}\n```", "<pre><code class=\"language-go\">if a&lt;b {}</code></pre>"},
		{"```\nunclosed <x>", "<pre><code>unclosed &lt;x&gt;</code></pre>"},
		{"[site](https://example.com/?a=1&b=2)", `<a href="https://example.com/?a=1&amp;b=2">site</a>`},
		{"[js](javascript:alert(1))", "[js](javascript:alert(1))"},
		{"**unclosed bold", "**unclosed bold"},
		{"</b><i>", "&lt;/b&gt;&lt;i&gt;"},
		{"snake_case_name and 2*3*4", "snake_case_name and 2*3*4"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := HTML(tt.in); got != tt.want {
				t.Fatalf("HTML(%q)\n got  %q\n want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzHTMLBalanced: whatever the input, the output's tags are balanced and properly nested,
// and no raw '<' survives outside the tags HTML adds.
func FuzzHTMLBalanced(f *testing.F) {
	for _, s := range []string{"**a [b** c](http://x)", "`a` **b** _c_", "```\nx\n```", "<b>", "*a **b* c**"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := balanced(HTML(s)); err != nil {
			t.Fatalf("HTML(%q) = %q: %v", s, HTML(s), err)
		}
	})
}

func balanced(h string) error {
	var stack []string
	for i := 0; i < len(h); i++ {
		if h[i] != '<' {
			continue
		}
		j := strings.IndexByte(h[i:], '>')
		if j < 0 {
			return errors.New("unterminated tag")
		}
		tag := h[i+1 : i+j]
		i += j
		if strings.HasPrefix(tag, "/") {
			if len(stack) == 0 || stack[len(stack)-1] != tag[1:] {
				return fmt.Errorf("</%s> closes %v", tag[1:], stack)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		name, _, _ := strings.Cut(tag, " ")
		switch name {
		case "b", "i", "s", "code", "pre", "a":
		default:
			return fmt.Errorf("unexpected tag <%s>", tag)
		}
		stack = append(stack, name)
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %v", stack)
	}
	return nil
}

func TestTextSegments(t *testing.T) {
	self := &tgbotapi.User{ID: 9, UserName: "mybot"}
	tests := []struct {
		name     string
		text     string
		entities []tgbotapi.MessageEntity
		want     string
		mention  bool
	}{
		{"no entities", "hello", nil, "text(hello)", false},
		{"bot mention", "@mybot hi", []tgbotapi.MessageEntity{{Type: "mention", Offset: 0, Length: 6}}, "at(9)|text( hi)", true},
		{"other mention", "hi @bob", []tgbotapi.MessageEntity{{Type: "mention", Offset: 3, Length: 4}}, "text(hi )|at(bob)", false},
		{"utf16 offsets after emoji", "😀 @mybot", []tgbotapi.MessageEntity{{Type: "mention", Offset: 3, Length: 6}}, "text(😀 )|at(9)", true},
		{"text_mention", "Ann look", []tgbotapi.MessageEntity{{Type: "text_mention", Offset: 0, Length: 3, User: &tgbotapi.User{ID: 5}}}, "at(5)|text( look)", false},
		{"bad entity ignored", "hi", []tgbotapi.MessageEntity{{Type: "mention", Offset: 1, Length: 9}}, "text(hi)", false},
		{"command addressed to the bot", "/reset@MyBot now", []tgbotapi.MessageEntity{{Type: "bot_command", Offset: 0, Length: 12}}, "text(/reset)|text( now)", true},
		{"command addressed to another bot", "/reset@otherbot", []tgbotapi.MessageEntity{{Type: "bot_command", Offset: 0, Length: 15}}, "text(/reset@otherbot)", false},
		{"plain command", "/reset", []tgbotapi.MessageEntity{{Type: "bot_command", Offset: 0, Length: 6}}, "text(/reset)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			segs, mention := textSegments(tt.text, tt.entities, self)
			var parts []string
			for _, s := range segs {
				if s.Type == "at" {
					parts = append(parts, "at("+s.MentionID()+")")
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
		err   error
		perm  bool
		retry time.Duration
	}{
		{&tgbotapi.Error{Code: 429, Message: "Too Many Requests", ResponseParameters: tgbotapi.ResponseParameters{RetryAfter: 7}}, false, 7 * time.Second},
		{&tgbotapi.Error{Code: 400, Message: "Bad Request: chat not found"}, true, 0},
		{&tgbotapi.Error{Code: 403, Message: "Forbidden: bot was blocked by the user"}, true, 0},
		{&tgbotapi.Error{Code: 502, Message: "Bad Gateway"}, false, 0},
		{errors.New(`Post "https://api.telegram.org/bot123:SECRET/sendMessage": dial tcp: timeout`), false, 0},
	}
	for _, tt := range tests {
		err := classify("sendMessage", tt.err)
		var e *im.Error
		if im.IsPermanent(err) != tt.perm || (errors.As(err, &e) && e.RetryAfter != tt.retry) {
			t.Errorf("%v: %v permanent=%v", tt.err, err, im.IsPermanent(err))
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("token in error text: %v", err)
		}
	}
}
