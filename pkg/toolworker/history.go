package toolworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store/transcript"
	"github.com/agentbus/agentbus/pkg/tools"
)

// chat_history limits.
const (
	DefaultHistoryLimit = 10
	MaxHistoryLimit     = 50
	// maxHistoryBody caps one row's text in the tool output (runes).
	maxHistoryBody = 500
	// maxKeyword caps the search keyword (runes).
	maxKeyword = 200
)

// HistorySearcher searches the transcript archive of one scene (platform, bot, scene id),
// newest rows first; "" as keyword returns the latest rows.
type HistorySearcher interface {
	Search(ctx context.Context, platform, bot, scene, keyword string, limit int) ([]transcript.Row, error)
}

// NATSHistory asks the transcript archive over NATS request/reply (the wire protocol is
// events.TranscriptSearchRequest / TranscriptSearchResponse on events.SubjectTranscriptSearch,
// served by egress).
type NATSHistory struct {
	NC *nats.Conn
	// Subject defaults to events.SubjectTranscriptSearch; Timeout (default 10s) applies when ctx has no deadline.
	Subject string
	Timeout time.Duration
}

// Search implements HistorySearcher.
func (n NATSHistory) Search(ctx context.Context, platform, bot, scene, keyword string, limit int) ([]transcript.Row, error) {
	subj := n.Subject
	if subj == "" {
		subj = events.SubjectTranscriptSearch
	}
	if _, ok := ctx.Deadline(); !ok {
		d := n.Timeout
		if d <= 0 {
			d = 10 * time.Second
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	data, err := json.Marshal(events.TranscriptSearchRequest{Platform: platform, Bot: bot, Scene: scene, Keyword: keyword, Limit: limit})
	if err != nil {
		return nil, err
	}
	msg, err := n.NC.RequestWithContext(ctx, subj, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: no transcript archive is answering on %s", ErrHistoryUnavailable, subj)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHistoryUnavailable, err)
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		return nil, fmt.Errorf("%w: %s (code %s)", ErrHistoryUnavailable, desc, msg.Header.Get(micro.ErrorCodeHeader))
	}
	var resp events.TranscriptSearchResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("%w: bad reply: %v", ErrHistoryUnavailable, err)
	}
	if resp.Error != "" {
		return nil, fmt.Errorf("%w: %s", ErrHistoryUnavailable, resp.Error)
	}
	return resp.Rows, nil
}

const historySchema = `{
  "type": "object",
  "properties": {
    "keyword": {"type": "string", "description": "text to look for in earlier messages of this chat (case-insensitive); empty for the latest messages"},
    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10, "description": "how many messages to return, newest first (default 10, at most 50)"}
  },
  "additionalProperties": false
}`

// ChatHistoryTool is the chat_history tool: a keyword search of this chat's transcript
// (inbound and outbound messages, across /reset epochs). The scene comes from the call's
// session (Env platform, bot, scene), so a user searches only the chat they are in.
// Results are lines "[2006-01-02 15:04] sender: body", newest first.
func ChatHistoryTool(s HistorySearcher) tools.Tool {
	return tools.MustRaw("chat_history",
		"Search earlier messages of this chat (including before the conversation was reset) by keyword, "+
			"or list the latest ones. Use it when the user refers to something said before "+
			"(之前, 上次, 历史, 回忆, earlier, last time).",
		json.RawMessage(historySchema),
		func(ctx context.Context, call tools.Call) (tools.Result, error) {
			var a struct {
				Keyword string `json:"keyword"`
				Limit   int    `json:"limit"`
			}
			if err := tools.DecodeArgs(call.Args, &a); err != nil {
				return tools.ErrorResult("chat_history: %v", err), nil
			}
			env := call.Env
			if env.Platform == "" || env.BotID == "" || env.SceneID == "" {
				return tools.ErrorResult("chat_history: this call has no chat (platform, bot and scene are required)"), nil
			}
			kw := strings.TrimSpace(a.Keyword)
			if utf8.RuneCountInString(kw) > maxKeyword {
				return tools.ErrorResult("chat_history: keyword is longer than %d characters", maxKeyword), nil
			}
			limit := a.Limit
			switch {
			case limit <= 0:
				limit = DefaultHistoryLimit
			case limit > MaxHistoryLimit:
				limit = MaxHistoryLimit
			}
			rows, err := s.Search(ctx, env.Platform, env.BotID, env.SceneID, kw, limit)
			if err != nil {
				return tools.ErrorResult("chat_history: %v", err), nil
			}
			if len(rows) > limit {
				rows = rows[:limit]
			}
			if len(rows) == 0 {
				if kw == "" {
					return tools.TextResult("No earlier messages are archived for this chat."), nil
				}
				return tools.TextResult(fmt.Sprintf("No earlier messages in this chat contain %q.", kw)), nil
			}
			return tools.TextResult(FormatHistory(rows)), nil
		},
		tools.Idempotent(), tools.WithSource("builtin"), tools.WithKeywords("history", "earlier", "last time", "previous", "we talked", "之前", "上次", "历史", "回忆", "聊过", "说过", "聊了什么"))
}

// FormatHistory renders rows as "[2006-01-02 15:04] sender: body" lines (UTC), one per row,
// in the order given; long bodies are cut and newlines inside a body become spaces.
func FormatHistory(rows []transcript.Row) string {
	var b strings.Builder
	for i, r := range rows {
		if i > 0 {
			b.WriteByte('\n')
		}
		sender := r.SenderName
		if sender == "" {
			sender = r.SenderID
		}
		if sender == "" {
			if r.Direction == transcript.Outbound {
				sender = "bot"
			} else {
				sender = "unknown"
			}
		}
		body := strings.Join(strings.Fields(r.Body), " ")
		if body == "" && r.MediaJSON != "" {
			body = "[media]"
		}
		if utf8.RuneCountInString(body) > maxHistoryBody {
			body = string([]rune(body)[:maxHistoryBody]) + "…"
		}
		fmt.Fprintf(&b, "[%s] %s: %s", time.UnixMilli(r.Time).UTC().Format("2006-01-02 15:04"), oneLine(sender), body)
	}
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
