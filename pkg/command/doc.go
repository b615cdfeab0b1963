// Package command is the table of chat commands ("/status", "/model gpt", ...): one row per
// command with who may run it (Access), how /help describes it, and the handler the session
// runs. Two roles read it and neither knows the other: ingest recognises a command and
// applies its Access before anything reaches the session inbox (the sender's refusal is
// answered directly); the turn worker's session actor runs its Handler against its
// implementation of Session. /help, /cmd and the command table of docs/configuration.md are
// derived from (or checked against) the same rows.
//
// # Adding a command
//
// Add a row to the table (commands.go) and, when the session answers it, a method to the
// small interface of Session it belongs to. The compiler then asks the turn worker for the
// method; ingest, /help and /cmd need nothing; the docs test (TestDocsCommandTable) asks for
// a row in docs/configuration.md.
//
// # Caveats
//
// Access is checked by ingest when the message arrives (a refused command never reaches the
// inbox) and again by the session before it runs a handler, because third parties may publish
// commands straight onto agent.in (docs/events.md); both checks read the same row. A handler
// runs with the permission granted and checks only what depends on its arguments (/tree N,
// /approve always, /tasks cancel). Access is only as true as the roles in the event: ingest
// assigns them; a direct publisher states them. A name that is not in the table is not
// refused: ingest still sends a "/word" addressed to the bot to the session, which answers
// "Unknown command".
package command
