package ingest

import (
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
)

// sessionCommands are the session and introspection commands the session actor answers
// (pkg/turn/commands_session.go), besides knownCommands.
var sessionCommands = map[string]bool{
	"new": true, "clear": true, "tools": true, "mcp": true, "bindings": true, "status": true,
	"model": true, "queue": true, "usage": true, "whoami": true, "context": true,
	"cmd": true, "endpoints": true,
}

// trustedOnly commands reveal the bot's configuration (/mcp, /bindings) or change what it
// costs (/model): masters and trusted users only, in any chat (seed: 内省命令 for master /
// 有权限用户).
var trustedOnly = map[string]bool{"mcp": true, "bindings": true, "model": true, "compact": true, "endpoints": true}

// moderatedSession are session commands that change the conversation for everyone in a group
// (like /reset): there they need a moderator.
var moderatedSession = map[string]bool{"new": true, "clear": true, "queue": true}

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

// mayRunSession applies trustedOnly and moderatedSession; ok is false for other commands.
func mayRunSession(name, scope string, sender events.Sender) (allowed, ok bool) {
	switch {
	case trustedOnly[name]:
		return sender.HasRole(events.RoleMaster) || sender.HasRole("trusted"), true
	case moderatedSession[name] && scope != events.ScopePrivate:
		return slices.ContainsFunc([]string{"master", "trusted", "group_admin", "group_owner"}, sender.HasRole), true
	}
	return false, false
}

// refusalText is the answer to a command the sender may not run.
func refusalText(name string) string {
	switch {
	case IsMasterOnly(name):
		return "/" + name + " is for the bot's masters only."
	case trustedOnly[name]:
		return "/" + name + " is for the bot's masters and trusted users."
	}
	return "/" + name + " in a group is for the bot's masters, trusted users and the group's admins."
}
