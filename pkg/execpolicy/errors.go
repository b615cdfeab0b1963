package execpolicy

import "errors"

// Sentinel errors; match with errors.Is.
var (
	// ErrBadOption: an invalid mode, preset, approval mode, allowlist
	// entry or sensitive rule in Options / configuration.
	ErrBadOption = errors.New("execpolicy: bad option")
	// ErrBadApproveCommand: an /approve command that does not parse
	// (unknown subcommand, missing argument, invalid regular expression).
	ErrBadApproveCommand = errors.New("execpolicy: bad /approve command")
	// ErrNoSuchRule: /approve revoke rule <id> matched no rule.
	ErrNoSuchRule = errors.New("execpolicy: no such approval rule")
	// ErrAmbiguousRule: an id prefix matched more than one rule.
	ErrAmbiguousRule = errors.New("execpolicy: ambiguous approval rule id")
	// ErrNoPendingApproval: "/approve always" without a recent pending
	// bash confirmation (use "/approve always bash").
	ErrNoPendingApproval = errors.New("execpolicy: no pending bash approval")
)
