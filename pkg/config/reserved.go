package config

// reservedKeys are keys of the seed's configuration that agentbus accepts but does not act on
// (yet). A file that sets any of them loads, and the process logs ONE warning listing those it
// set (see ReservedWarning), so nobody believes a setting works that does nothing.
//
// This is the one list to edit: when a key gets implemented, delete its line here (and add the
// field to the config struct if it is not there already). "*" matches any one map key, e.g. a
// provider alias. A key listed here that is not a field of the config struct is also accepted
// by the unknown-key check; its value is ignored.
var reservedKeys = []string{
	"ai.sessions.useDatabase", // sessions always live in JetStream (KV sessions, AGENT_CTX)
	"ai.trigger.timeout",
	"ai.providers.*.capabilities.streaming",
	"ai.providers.*.capabilities.toolCalling",
	"ai.providers.*.thinking",
	"ai.providers.*.extra",
	"ai.extra",
}
