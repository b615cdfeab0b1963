package command

// table is every chat command, in the order /help lists them. See the package doc for what
// a row takes; docs/configuration.md's command table is checked against it.
var table = []Command{
	{Name: "new", Access: Moderator, Usage: "/new", HelpWith: "reset", Handler: Session.Reset},
	{Name: "clear", Access: Moderator, Usage: "/clear", HelpWith: "reset", Handler: Session.Reset},
	{Name: "reset", Access: Moderator, Usage: "/reset", Help: "start a new conversation (chat history is kept)", Handler: Session.Reset},
	// /cancel is an abort event (ingest), never a command in the session.
	{Name: "cancel", Access: Moderator, Usage: "/cancel", Help: "stop the running turn"},
	{Name: "status", Access: Anyone, Usage: "/status", Help: "this session: model, concurrency, turns, context size", Handler: Session.Status},
	{Name: "model", Access: Trusted, Usage: "/model [name]", Help: "show or switch this chat's model (masters, trusted)", Handler: Session.Model},
	{Name: "queue", Access: Moderator, Usage: "/queue [policy]", Help: "show or set how messages during a turn are handled: parallel, queue, steer, interrupt, collect", Handler: Session.Queue},
	{Name: "usage", Access: Anyone, Usage: "/usage", Help: "tokens and cost of this conversation", Handler: Session.Usage},
	{Name: "context", Access: Anyone, Usage: "/context", Help: "what the model sees next turn, how full the window is, compactions so far", Handler: Session.Context},
	{Name: "compact", Access: Trusted, Usage: "/compact [instructions]", Help: "summarize the older part of the conversation now (masters, trusted)", Handler: Session.Compact},
	// /tree lists for anyone; the handler checks the role for /tree N.
	{Name: "tree", Access: Anyone, Usage: "/tree, /tree N", Help: "the conversation's points; continue from point N (masters, trusted)", Handler: Session.Tree},
	{Name: "whoami", Access: Anyone, Usage: "/whoami", Help: "who the bot takes you for", Handler: Session.Whoami},
	{Name: "tools", Access: Anyone, Usage: "/tools [filter] [page]", Help: "the tools you may use here", Handler: Session.Tools},
	{Name: "cmd", Access: Anyone, Usage: "/cmd [filter] [page]", Help: "the commands, one per line", Handler: Session.Cmd},
	{Name: "endpoints", Access: Trusted, Usage: "/endpoints [filter] [page]", Help: "the IM endpoints (platform/bot) and their adapters' state (masters, trusted)", Handler: Session.Endpoints},
	{Name: "mcp", Access: Trusted, Usage: "/mcp", HelpWith: "bindings", Handler: Session.MCP},
	{Name: "bindings", Access: Trusted, Usage: "/bindings", Help: "MCP servers, ai.agents bindings (masters, trusted)", Handler: Session.Bindings},
	{Name: "models", Access: Anyone, Usage: "/models", HelpWith: "health", Handler: Session.Models},
	{Name: "health", Access: Anyone, Usage: "/health", Help: "providers and models, worker health", Handler: Session.Health},
	// /steer and /followup are inbox events of their own (ingest), never commands in the session.
	{Name: "steer", Access: Master, Usage: "/steer <text>", HelpWith: "followup"},
	{Name: "followup", Access: Master, Usage: "/followup <text>", Help: "add to the running turn (masters)"},
	// The handler checks that the forms "for good" come from a private chat.
	{Name: "approve", Access: Master, Usage: "/approve [id]", Help: "let a waiting bash command of this chat (or the one with that id) run once (masters)",
		More:    []string{"/approve always|rule …|list|revoke …: approve bash commands for good (masters, private chat)"},
		Handler: Session.Approve},
	{Name: "tasks", Access: Anyone, Usage: "/tasks, /tasks cancel <id>", Help: "reminders, scheduled jobs and background tasks of this chat", Handler: Session.Tasks},
	// /help does not list itself.
	{Name: "help", Access: Anyone, Usage: "/help", Handler: Session.Help},
}
