// Package execpolicy decides whether the bash tool may run a command line.
//
// The command line is parsed with a real shell parser (mvdan.cc/sh/v3/syntax,
// bash dialect) and every simple command in the tree is judged: pipelines,
// && || ; and newlines, subshells and { } blocks, if/while/for/case bodies,
// command substitution $(…) and `…`, process substitution <(…) >(…),
// here-documents, the strings given to bash -c / sh -c (parsed recursively),
// here-documents and here-strings fed to a shell, KEY=v prefixes and env,
// safe wrappers (timeout, nice, nohup, stdbuf, ionice, setsid, time,
// command, builtin, busybox), xargs and find -exec payloads, trap actions.
// Every judged command is reduced to its real program name (quotes and
// escapes removed the way the shell removes them, /usr/bin/x -> x) and
// argv. What cannot be judged statically — a command name that comes from
// a variable or a substitution, a non-ASCII name, a glob in command
// position, function definitions, arithmetic or array subscripts over
// anything but numbers and variables that hold numbers (bash evaluates
// ${a['$(cmd)']} and the value of x in $((x)) as code), compound values
// given to declare & co. (parsed again), ${!X}, coproc, a shell that
// reads its script from a pipe, shell options that change parsing (set
// -k, -o keyword, login shells), shells whose language is not bash's, a
// parse error, a line nested or expanding past the check's budget — is
// denied; outside full mode so are command and process substitution and
// redirections to /dev/tcp or to a target only known at run time.
// Options that name a program (wget --use-askpass, tar --to-command,
// git -c core.pager, ...) have that program judged as a command, in every
// mode and whether or not the tool is allowlisted.
//
// Options are read as getopt reads them (long options by unique prefix),
// a read-only tool is read-only only with its complete option table
// (pkg/filepolicy), and a run-time argument where an argument rule applies
// (rm -r targets, kill pids, options of read-only tools) is denied or
// needs approval. Interpreters and tools that run code the policy cannot
// read (python -c, script files, npm, make, ...) need the operator's
// allowlist entry or the owner's approval, never execApprovalMode allow;
// what such code does is confined by pkg/sandbox, not by the policy.
//
// Layers, in order (the seed's "6 层纵深防御"):
//  1. hard blocklist ([Blocklist]): denied in every mode, never approvable;
//  2. KEY=value prefixes stripped (dangerous variables such as PATH,
//     LD_PRELOAD, BASH_ENV are denied);
//  3. safe wrappers stripped, their payload judged;
//  4. compound commands split, every part judged; the verdict is the
//     strictest of the parts (deny > ask > allow);
//  5. read-only commands (pkg/filepolicy's shared classification) allowed
//     in allowlist mode; with a file policy their paths must pass it;
//     5+. sensitive subcommands ([DefaultSensitive], the icqq table;
//     options, other cases or orders count as sensitive);
//  6. owner approval: commands outside the allowlist give [Ask] when the
//     approval mode is "ask" (the agent asks the owner through ask_user),
//     unless the owner already approved them ([Approvals]).
//
// Modes: "deny" (default) refuses every command line; "allowlist" allows
// the preset ∪ execAllowlist, read-only commands and non-sensitive
// subcommands of the sensitive table; "full" allows everything that is
// not hard-blocked and can be judged.
//
// A Policy is immutable and safe for concurrent use; subagents and
// deferred workers share the same value as the main agent.
package execpolicy

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/filepolicy"
)

// Mode is ai.agent.execSecurity.
type Mode string

const (
	ModeDeny      Mode = "deny"
	ModeAllowlist Mode = "allowlist"
	ModeFull      Mode = "full"
)

// ApprovalMode is ai.agent.execApprovalMode: what happens to a command in
// allowlist mode that is neither allowed nor blocked.
type ApprovalMode string

const (
	ApprovalDeny  ApprovalMode = "deny"  // refuse (default)
	ApprovalAsk   ApprovalMode = "ask"   // Ask verdict: the owner decides
	ApprovalAllow ApprovalMode = "allow" // run it
)

// Decision is the outcome of [Policy.Check].
type Decision int

const (
	Deny Decision = iota
	Ask
	Allow
)

func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	}
	return "deny"
}

// OwnerApprovalSignal is the marker the bash tool puts in its result when a
// command needs the owner's approval (the seed's ZHIN_NEEDS_OWNER): the
// agent then asks through ask_user and retries once approved.
const OwnerApprovalSignal = "ZHIN_NEEDS_OWNER"

// Verdict is the judgment of one command line.
type Verdict struct {
	Decision Decision
	// Reason is a one-line human explanation (for the model and the log).
	Reason string
	// Commands are the simple commands found, normalized ("icqq friend
	// like 123", wrappers and KEY=v prefixes stripped), in source order.
	Commands []string
	// Pending are the normalized commands that need the owner's approval
	// (set when Decision is Ask; an approval rule must match each).
	Pending []string
}

// Presets are the seed's execPreset lists.
var Presets = map[string][]string{
	"readonly":    {"ls", "cat", "pwd", "date", "whoami", "grep", "find", "head", "tail", "wc", "stat", "file"},
	"network":     {"ls", "cat", "pwd", "date", "whoami", "grep", "find", "head", "tail", "wc", "stat", "file", "curl", "wget", "ping", "dig", "nslookup", "host"},
	"development": {"ls", "cat", "pwd", "date", "whoami", "grep", "find", "head", "tail", "wc", "stat", "file", "curl", "wget", "ping", "dig", "nslookup", "host", "npm", "npx", "node", "git", "gh", "python", "python3", "pip", "pnpm", "yarn", "tsc", "bun"},
	"custom":      {},
}

// DefaultSensitive is the default sensitive-subcommand table: for a command
// name, regular expressions over the normalized command; a match needs the
// owner's approval (or an approval rule, or /approve always bash) even in
// allowlist mode, while other subcommands of that program are allowed
// without being in the allowlist. The icqq rules follow the seed: kick,
// mute, group dismiss/transfer/quit, friend delete/block/move, payments
// and wallet, recall, group file deletion.
var DefaultSensitive = map[string][]string{
	"icqq": {
		`^icqq\s+group\s+(kick|mute|ban|unmute|mute-all|muteall|dismiss|disband|transfer|quit|leave|admin|set-admin|title)\b`,
		`^icqq\s+group\s+(file|fs)\s+(rm|del|delete|remove|mv|move)\b`,
		`^icqq\s+friend\s+(delete|del|remove|rm|block|blacklist|move|class)\b`,
		`^icqq\s+(pay|payment|wallet|transfer|redpacket|red-packet|hongbao)\b`,
		`^icqq\s+(\S+\s+)?(recall|withdraw)\b`,
		`^icqq\s+(logout|login|config|set-password|account)\b`,
	},
}

// Options configure a [Policy].
type Options struct {
	Mode     Mode
	Preset   string   // readonly | network | development | custom ("" = custom)
	Allow    []string // execAllowlist, merged with the preset
	Approval ApprovalMode
	// Sensitive overrides DefaultSensitive when non-nil (an empty map
	// disables the table).
	Sensitive map[string][]string
	// Files, when set, checks the paths of read-only commands and the
	// targets of redirections.
	Files *filepolicy.Policy
}

// Policy is a compiled exec policy. Build it with [New] or [FromConfig].
type Policy struct {
	mode      Mode
	preset    string
	allow     map[string]bool
	approval  ApprovalMode
	sensitive map[string][]*regexp.Regexp
	files     *filepolicy.Policy
}

// New validates and compiles opts.
func New(opts Options) (*Policy, error) {
	p := &Policy{
		mode:     opts.Mode,
		preset:   opts.Preset,
		approval: opts.Approval,
		allow:    map[string]bool{},
		files:    opts.Files,
	}
	if p.mode == "" {
		p.mode = ModeDeny
	}
	switch p.mode {
	case ModeDeny, ModeAllowlist, ModeFull:
	default:
		return nil, fmt.Errorf("%w: mode %q (want deny, allowlist or full)", ErrBadOption, opts.Mode)
	}
	if p.preset == "" {
		p.preset = "custom"
	}
	list, ok := Presets[p.preset]
	if !ok {
		return nil, fmt.Errorf("%w: preset %q (want readonly, network, development or custom)", ErrBadOption, opts.Preset)
	}
	if p.approval == "" {
		p.approval = ApprovalDeny
	}
	switch p.approval {
	case ApprovalDeny, ApprovalAsk, ApprovalAllow:
	default:
		return nil, fmt.Errorf("%w: approval mode %q (want deny, ask or allow)", ErrBadOption, opts.Approval)
	}
	for _, c := range append(slices.Clone(list), opts.Allow...) {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !validName(c) || strings.Contains(c, "/") {
			return nil, fmt.Errorf("%w: allowlist entry %q is not a bare command name", ErrBadOption, c)
		}
		if isBlocked(c) {
			return nil, fmt.Errorf("%w: allowlist entry %q is on the hard blocklist", ErrBadOption, c)
		}
		p.allow[c] = true
	}
	sens := opts.Sensitive
	if sens == nil {
		sens = DefaultSensitive
	}
	p.sensitive = map[string][]*regexp.Regexp{}
	for name, pats := range sens {
		for _, pat := range pats {
			re, err := regexp.Compile(pat)
			if err != nil {
				return nil, fmt.Errorf("%w: sensitive rule for %s: %q: %v", ErrBadOption, name, pat, err)
			}
			p.sensitive[name] = append(p.sensitive[name], re)
		}
		if _, ok := p.sensitive[name]; !ok {
			p.sensitive[name] = nil
		}
	}
	return p, nil
}

// FromConfig builds the policy from ai.agent (execSecurity, execPreset,
// execAllowlist, execApprovalMode, sensitiveSubcommands). files may be nil.
func FromConfig(a config.Agent, files *filepolicy.Policy) (*Policy, error) {
	return New(Options{
		Mode:      Mode(a.ExecSecurity),
		Preset:    a.ExecPreset,
		Allow:     a.ExecAllowlist,
		Approval:  ApprovalMode(a.ExecApprovalMode),
		Sensitive: a.SensitiveSubcommands,
		Files:     files,
	})
}

// Mode returns the policy's mode.
func (p *Policy) Mode() Mode { return p.mode }

// ApprovalMode returns the policy's approval mode.
func (p *Policy) ApprovalMode() ApprovalMode { return p.approval }

// Allowlist returns the merged allowlist, sorted.
func (p *Policy) Allowlist() []string {
	out := make([]string, 0, len(p.allow))
	for c := range p.allow {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}
