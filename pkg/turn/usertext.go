package turn

import (
	"path"
	"regexp"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
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
