package identity

import (
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
)

// StripBotMention removes the bot's own mention typed as text ("@<bot id>", or "@<name>" when
// an at segment names the bot so): it is the trigger, not content. Other text is unchanged.
func StripBotMention(text string, m *events.IMMessage) string {
	if !strings.Contains(text, "@") {
		return text
	}
	names := []string{m.Bot}
	for _, s := range m.Content {
		if s.IsSelfMention(m.Bot) {
			// The bot's platform id ("@20001") and its name, as the at segment gives them; a name
			// Telegram writes with its "@" counts without it.
			names = append(names, s.MentionID(), strings.TrimPrefix(s.Str("name"), "@"))
		}
	}
	for _, n := range names {
		if n == "" {
			continue
		}
		text = removeWord(text, "@"+n)
	}
	return strings.TrimSpace(text)
}

// removeWord deletes each occurrence of w that is not followed by a letter or digit (so
// "@zhin" leaves "@zhinbot" alone), with one following space.
func removeWord(text, w string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, w)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		end := i + len(w)
		if end < len(text) && isWordByte(text[end]) {
			b.WriteString(text[:end])
			text = text[end:]
			continue
		}
		b.WriteString(text[:i])
		text = strings.TrimPrefix(text[end:], " ")
	}
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
}
