package command

import (
	"context"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
)

// Command is one row of the table.
type Command struct {
	Name   string // without the "/", lower case
	Access Access
	// Usage is how /help writes the command: "/model [name]".
	Usage string
	// Help is the rest of its /help line: "show or switch this chat's model (masters,
	// trusted)". Empty with HelpWith set: the command shares that command's line
	// ("/new, /clear, /reset: ..."); empty without: the command is not listed (/help).
	Help     string
	HelpWith string
	// More are further whole lines of /help for the command's other forms.
	More []string
	// Handler answers the command in the session. nil: ingest turns the command into an
	// inbox event of its own (/cancel is an abort, /steer and /followup add to the running
	// turn), so the session never runs it as a command.
	Handler Handler
}

// Handler answers one command for a session and returns the reply text. It is a method
// expression of Session (Session.Status), so the table names what the session must do and
// the compiler holds the turn worker to it. ctx bounds the work of this one command; an
// error is a failure of the session's storage, not a refusal (a refusal is a reply).
type Handler func(s Session, ctx context.Context, c events.Command) (string, error)

// Run answers c with the row's handler. ok is false when the row has none.
func (c Command) Run(ctx context.Context, s Session, call events.Command) (reply string, ok bool, err error) {
	if c.Handler == nil {
		return "", false, nil
	}
	reply, err = c.Handler(s, ctx, call)
	return reply, true, err
}

// Access is who may run a command. The roles are those ingest gives a sender
// (events.RoleMaster, events.RoleTrusted, and the platform's group_admin and group_owner).
type Access int

const (
	// Anyone may run it, in any chat.
	Anyone Access = iota
	// Moderator commands change the conversation for everyone in a group: in a private chat
	// anyone may run them, in groups and channels masters, trusted users and the group's
	// admins and owner.
	Moderator
	// Trusted commands reveal the bot's configuration or change what it costs: masters and
	// trusted users only, in any chat (seed: 内省命令 for master / 有权限用户).
	Trusted
	// Master commands act on the bot's owner's behalf: masters only.
	Master
)

// moderators are the roles that may run Moderator commands in a group.
var moderators = []string{events.RoleMaster, events.RoleTrusted, "group_admin", "group_owner"}

// Allows reports whether sender may run a command of this access in a scene of scope.
func (a Access) Allows(scope string, sender events.Sender) bool {
	switch a {
	case Master:
		return sender.HasRole(events.RoleMaster)
	case Trusted:
		return sender.HasRole(events.RoleMaster) || sender.HasRole(events.RoleTrusted)
	case Moderator:
		return scope == events.ScopePrivate || slices.ContainsFunc(moderators, sender.HasRole)
	}
	return true
}

// Refusal is the answer to a sender who may not run command name of access a.
func (a Access) Refusal(name string) string {
	switch a {
	case Master:
		return "/" + name + " is for the bot's masters only."
	case Trusted:
		return "/" + name + " is for the bot's masters and trusted users."
	}
	return "/" + name + " in a group is for the bot's masters, trusted users and the group's admins."
}

// String is how docs/configuration.md's "who" column starts for the access.
func (a Access) String() string {
	switch a {
	case Master:
		return "masters"
	case Trusted:
		return "masters, trusted"
	case Moderator:
		return "anyone in a private chat; in groups and channels masters, trusted users and the group's admins and owner"
	}
	return "anyone"
}

// Lookup returns the command called name (lower case, without "/").
func Lookup(name string) (Command, bool) {
	i := slices.IndexFunc(table, func(c Command) bool { return c.Name == name })
	if i < 0 {
		return Command{}, false
	}
	return table[i], true
}

// All returns the table's rows in /help order. The slice is a copy.
func All() []Command { return slices.Clone(table) }

// HelpLines are the lines of /help after its heading, in table order: commands sharing a
// line (HelpWith) joined with ", ", then each command's More.
func HelpLines() []string {
	var lines []string
	pending := map[string][]string{}
	for _, c := range table {
		if c.HelpWith != "" {
			pending[c.HelpWith] = append(pending[c.HelpWith], c.Usage)
			continue
		}
		if c.Help == "" {
			continue
		}
		usages := append(pending[c.Name], c.Usage)
		lines = append(lines, strings.Join(usages, ", ")+": "+c.Help)
		lines = append(lines, c.More...)
	}
	return lines
}

// HelpText is the answer to /help.
func HelpText() string { return "Commands:\n" + strings.Join(HelpLines(), "\n") }
