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
// Access is checked by ingest only, once, when the message arrives: a handler runs with the
// permission already granted and checks only what depends on its arguments (/tree N, /approve
// always). A name that is not in the table is not refused: ingest still sends "/word" that is
// addressed to the bot to the session, which answers "Unknown command".
package command
