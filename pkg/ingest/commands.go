package ingest

import (
	"strings"

	"github.com/agentbus/agentbus/pkg/command"
	"github.com/agentbus/agentbus/pkg/events"
)

// commandName reports whether word (after the "/") can name a command: an ASCII letter, then
// letters, digits, "_" or "-". "/usr/bin/ls" or "/:)" are not commands.
func commandName(word string) bool {
	if word == "" || !(word[0] >= 'a' && word[0] <= 'z') {
		return false
	}
	for i := 1; i < len(word); i++ {
		c := word[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// unknownCommand turns "/name ..." that names no command into a command event, so the session
// answers "unknown command" instead of nothing (or the model guessing). Only for messages
// addressed to the bot: a "/shrug" between group members is theirs.
func unknownCommand(text string, m *events.IMMessage) *events.Command {
	if !strings.HasPrefix(text, "/") {
		return nil
	}
	fields := strings.Fields(text[1:])
	if len(fields) == 0 {
		return nil
	}
	name, ok := commandFor(fields[0], m)
	if !ok || !commandName(name) {
		return nil
	}
	mc := *m
	return &events.Command{Name: name, Args: fields[1:], Raw: strings.TrimSpace(strings.TrimPrefix(text[1:], fields[0])), Message: &mc}
}

// refusalText is the answer to a command the sender may not run.
func refusalText(name string) string {
	c, _ := command.Lookup(name)
	return c.Access.Refusal(name)
}
