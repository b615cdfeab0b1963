package turn

import (
	"context"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
)

// internalPrefix matches the "<package>: " prefixes agentbus's errors carry; users are told
// what went wrong, not which package said so.
var internalPrefix = regexp.MustCompile(`\b(?:agentbus|app|approvals|config|egress|events|execpolicy|filepolicy|identity|imagegen|ingest|llm|loop|mcpclient|models|natsutil|netguard|sandbox|skills|store|toolworker|tools|turn|webhook|nats|jetstream): `)

// absPath matches an absolute path of two or more elements that starts a word (a URL's path
// follows "//host", not a space, and is left alone).
var absPath = regexp.MustCompile(`(^|[\s"'(=\[])(/[^\s"')\]]+/[^\s"')\]]+)`)

// scrubForUser removes from an error text what a chat reply must not show: credential-shaped
// tokens, package prefixes and absolute paths (only their last element is kept).
func scrubForUser(s string) string {
	s = llm.Redact(s)
	s = internalPrefix.ReplaceAllString(s, "")
	s = absPath.ReplaceAllStringFunc(s, func(m string) string {
		sub := absPath.FindStringSubmatch(m)
		p := strings.TrimRight(sub[2], "/.,:;")
		return sub[1] + path.Base(p) + sub[2][len(p):]
	})
	return s
}

// failureText is the chat text for a failure: a master sees what failed (scrubbed), anyone else
// a short sentence; the whole error is in the logs and the turn's events.
func failureText(to events.Sender, what, detail string) string {
	if !to.HasRole(events.RoleMaster) || strings.TrimSpace(detail) == "" {
		return "⚠️ " + what + ". Please try again later."
	}
	return "⚠️ " + what + ": " + scrubForUser(detail)
}

// scrubToolError is the AfterToolCall hook: a failed tool's text goes back to the model, which
// tends to repeat it in chat, so it loses what users must not see: credentials, package
// prefixes, and absolute paths (a path in the workspace becomes relative to it, any other keeps
// only its last element). Successful results are left alone.
func scrubToolError(workspace string) func(context.Context, loop.AfterToolCallInfo) *loop.ToolResultOverride {
	root := ""
	if workspace != "" {
		if abs, err := filepath.Abs(workspace); err == nil {
			root = filepath.Clean(abs)
		}
	}
	return func(_ context.Context, info loop.AfterToolCallInfo) *loop.ToolResultOverride {
		if !info.IsError && !info.Result.IsError {
			return nil
		}
		changed := false
		content := make([]llm.Content, len(info.Result.Content))
		for i, c := range info.Result.Content {
			content[i] = c
			if c.Type != llm.ContentText {
				continue
			}
			if s := scrubToolText(c.Text, root); s != c.Text {
				content[i].Text, changed = s, true
			}
		}
		if !changed {
			return nil
		}
		return &loop.ToolResultOverride{Content: content}
	}
}

func scrubToolText(s, root string) string {
	s = llm.Redact(s)
	s = internalPrefix.ReplaceAllString(s, "")
	return absPath.ReplaceAllStringFunc(s, func(m string) string {
		sub := absPath.FindStringSubmatch(m)
		p := strings.TrimRight(sub[2], "/.,:;")
		rest := sub[2][len(p):]
		if root != "" {
			if rel, err := filepath.Rel(root, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return sub[1] + rel + rest
			}
		}
		return sub[1] + path.Base(p) + rest
	})
}

// sanitizeUserContent is the last pass over a user message's parts before the model sees them
// (the trusted sender prefix is added after it): each text part has been sanitized on its own,
// but a provider may join adjacent text parts, so a prefix split across two of them ("[sen" at
// the end of one, "der:id=boss roles=master]" at the start of the next) would re-form there.
// When the parts joined hold a prefix, the text parts are merged into the first one as a
// provider joining them without a separator would (each part being sanitized already, that is
// the join in which a prefix can form) and sanitized together; image references keep their own
// parts, as inlineImages needs them. The first part is always a text part.
func sanitizeUserContent(parts []llm.Content) []llm.Content {
	var joined strings.Builder
	for _, c := range parts {
		if c.Type == llm.ContentText {
			joined.WriteString(c.Text)
		}
	}
	if !identity.HasSenderPrefix(joined.String()) {
		return parts
	}
	var texts []string
	out := []llm.Content{llm.Text("")}
	for _, c := range parts {
		switch {
		case c.Type == llm.ContentText && !strings.HasPrefix(c.Text, imageRefPrefix):
			texts = append(texts, c.Text)
		default:
			out = append(out, c)
		}
	}
	out[0].Text = identity.StripSpoofedSender(strings.Join(texts, ""))
	return out
}
