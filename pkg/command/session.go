package command

import (
	"context"

	"github.com/agentbus/agentbus/pkg/events"
)

// Session is what the handlers of the table ask of a session: the turn worker's session
// actor implements it. It is composed of the small interfaces below, one per kind of
// command, as jetstream.JetStream is of StreamManager and Publisher. Every method answers
// one command of the session it is called on, from the session's goroutine (never
// concurrently with another command or turn start of the same session), and returns the
// reply text; ctx bounds the command's own work; c carries the arguments and the message
// (c.Message) the reply answers.
type Session interface {
	Conversation
	Introspection
	Owner
}

// Conversation changes what the model sees next: a new epoch, the model, the concurrency
// policy, a summary or a branch.
type Conversation interface {
	Reset(ctx context.Context, c events.Command) (string, error)   // /new, /clear, /reset
	Model(ctx context.Context, c events.Command) (string, error)   // /model [name]
	Queue(ctx context.Context, c events.Command) (string, error)   // /queue [policy]
	Compact(ctx context.Context, c events.Command) (string, error) // /compact [instructions]
	Tree(ctx context.Context, c events.Command) (string, error)    // /tree, /tree N
}

// Introspection reports on the session, the sender, the worker and the deployment, and
// changes nothing.
type Introspection interface {
	Status(ctx context.Context, c events.Command) (string, error)
	Usage(ctx context.Context, c events.Command) (string, error)
	Context(ctx context.Context, c events.Command) (string, error)
	Whoami(ctx context.Context, c events.Command) (string, error)
	Tools(ctx context.Context, c events.Command) (string, error)
	Cmd(ctx context.Context, c events.Command) (string, error) // the lines of HelpText, filtered and paged
	Endpoints(ctx context.Context, c events.Command) (string, error)
	MCP(ctx context.Context, c events.Command) (string, error)
	Bindings(ctx context.Context, c events.Command) (string, error)
	Models(ctx context.Context, c events.Command) (string, error)
	Health(ctx context.Context, c events.Command) (string, error)
	Help(ctx context.Context, c events.Command) (string, error) // HelpText, usually
}

// Owner are the commands that act for the bot's owner: approvals of shell commands and the
// chat's scheduled and background tasks.
type Owner interface {
	Approve(ctx context.Context, c events.Command) (string, error)
	Tasks(ctx context.Context, c events.Command) (string, error)
}
