package events

// PlatformFork is the platform of a fork session: a copy of a conversation that the web
// console (pkg/webconsole) re-runs against another model. Its key is
// fork:<fork id>:<scope>:<the original session key>, so it names where it came from. Turn
// workers run its turns like any other session's; egress acks its reply parts without sending
// them anywhere and without dead-lettering them (there is no platform to send to).
const PlatformFork = "fork"
