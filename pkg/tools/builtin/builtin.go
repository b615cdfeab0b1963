// Package builtin provides agentbus's built-in tools: read_file, write_file, edit_file,
// list_dir, glob, grep, bash, web_fetch, web_search, ask_user, activate_skill, install_skill.
//
// The file tools resolve every path through pkg/filepolicy (workspace confinement, symlink
// escapes, device and private paths); bash asks pkg/execpolicy first and runs through
// pkg/sandbox; web_fetch and install_skill go through pkg/netguard (the SSRF guard). Each
// tool is built from a Config so tool workers, subagents and deferred workers that share a
// Config share the same policies.
//
// Contracts the pipeline relies on:
//   - ask_user: Result.Details is tools.AskDetails {"ask": question, "options": [...]}; the
//     turn should end and the question go to the chat.
//   - bash with an Ask verdict: Result.NeedsOwner is true, IsError is true (the command did not
//     run) and the text starts with ZHIN_NEEDS_OWNER and tells the agent to use ask_user.
//   - activate_skill: Details is SkillDetails (the skill's tools, for the pipeline to add).
package builtin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/netguard"
	"github.com/agentbus/agentbus/pkg/sandbox"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/tools"
)

// Config selects and configures the built-in tools. A nil dependency leaves out the tools
// that need it.
type Config struct {
	// Files is required for the file tools and bash.
	Files *filepolicy.Policy
	// Exec judges bash command lines (*execpolicy.Policy); nil leaves bash out.
	Exec ExecChecker
	// Approvals loads the endpoint's owner approvals for bash (optional).
	Approvals ApprovalsFunc
	// Confirmations records commands waiting for the owner and uses up one-time approvals
	// (optional; without it an Ask verdict can only be lifted by rules or "always").
	Confirmations Confirmations
	// BashTimeout caps one command (default 30s); BashOutputLimit caps each output stream.
	BashTimeout     time.Duration
	BashOutputLimit int
	// Guard is the SSRF guard of web_fetch and install_skill (default: netguard with no
	// exceptions).
	Guard *netguard.Guard
	// FetchMaxBytes (default 2 MiB) and FetchTimeout (default 30s) bound web_fetch.
	FetchMaxBytes int64
	FetchTimeout  time.Duration
	// Search is web_search's backend; nil leaves web_search out.
	Search SearchBackend
	// Skills enables activate_skill; with SkillsDir also install_skill.
	Skills    *skills.Store
	SkillsDir string
	// ModelSizeHint and SkillInstructionMaxChars size activate_skill's text.
	ModelSizeHint            string
	SkillInstructionMaxChars int
	// InstallSkillRoles gate install_skill (default master and trusted: installing a skill
	// changes the bot for everyone).
	InstallSkillRoles []string
	// Disabled names tools to leave out (ai.tools.disabled); Enabled, when non-empty, is the
	// only ones to keep (ai.tools.enabled).
	Enabled, Disabled []string
	// Sandbox configures how bash commands are isolated (ai.agent.sandbox).
	Sandbox SandboxConfig
	Log     *slog.Logger
}

// SandboxConfig is the bash tool's share of pkg/sandbox's Spec, from ai.agent.sandbox.
type SandboxConfig struct {
	// AllowUnisolated runs bash without kernel isolation where bubblewrap cannot isolate
	// (an explicit operator opt-out, logged loudly); without it bash refuses every call there.
	AllowUnisolated bool
	// Network, AllowNets, Limits and RunAs go to every command's sandbox.Spec.
	Network   sandbox.Network
	AllowNets []netip.Prefix
	Limits    sandbox.Limits
	RunAs     *sandbox.Credential
}

// ErrNoIsolation: execSecurity full was configured where the bash sandbox
// cannot isolate commands (no bubblewrap, or no user namespaces); fix the
// host or choose allowlist mode.
var ErrNoIsolation = errors.New("builtin: bash sandbox unavailable")

// probeIsolation is sandbox.Probe; a test replaces it to play a host
// without user namespaces.
var probeIsolation = sandbox.Probe

// protectProcess is sandbox.ProtectProcess (a test may count calls).
var protectProcess = sandbox.ProtectProcess

// newBashTool decides, once at start-up, how bash commands run here: isolated (bubblewrap
// works), refused (it does not, and the operator did not opt out: every call gets the reason),
// or unisolated (the operator's explicit, loudly logged opt-out). execSecurity full never runs
// unisolated. The worker also makes itself non-dumpable, so that no process of its user
// (an unisolated command, a stdio MCP server) reads its environment through /proc.
func newBashTool(cfg Config) (bashTool, error) {
	iso := probeIsolation()
	full, off := false, false
	if m, ok := cfg.Exec.(interface{ Mode() execpolicy.Mode }); ok {
		full, off = m.Mode() == execpolicy.ModeFull, m.Mode() == execpolicy.ModeDeny
	}
	sc := cfg.Sandbox
	bt := bashTool{exec: cfg.Exec, approvals: cfg.Approvals, confirm: cfg.Confirmations, files: cfg.Files, timeout: cfg.BashTimeout,
		maxOut: cfg.BashOutputLimit, log: cfg.Log, run: sandbox.Run, hide: cfg.Files.PrivatePaths(), sandbox: sc}
	if off {
		cfg.Log.Info(iso.String())
		return bt, nil
	}
	if err := protectProcess(); err != nil {
		cfg.Log.Warn("bash sandbox: could not make the worker non-dumpable", "err", err)
	}
	if os.Geteuid() == 0 && sc.RunAs == nil {
		cfg.Log.Warn("bash sandbox: the tool worker runs as root and ai.agent.sandbox.runAs is not set: the process limit " +
			"does not hold for uid 0, and without isolation commands could read everything root can")
	}
	switch {
	case iso.Available && sc.Network == sandbox.NetworkOutbound && !iso.Outbound:
		bt.refuse = fmt.Sprintf("bash is disabled on this tool worker: the configured outbound network (ai.agent.sandbox.network, "+
			"execPreset network) needs slirp4netns, nsenter and ip, and %s. The operator must install them or set network: none.", iso.OutboundReason)
		cfg.Log.Error("BASH DISABLED: "+bt.refuse, "sandbox", iso.String())
	case iso.Available:
		cfg.Log.Info(iso.String(), "network", sc.Network.String(), "limits", sc.Limits.String())
	case full:
		return bt, fmt.Errorf("%w: execSecurity full needs the bash sandbox, and %s", ErrNoIsolation, iso.Reason)
	case sc.AllowUnisolated:
		bt.unisolated = true
		cfg.Log.Warn("BASH SANDBOX OPT-OUT: ai.agent.sandbox.allowUnisolated is set and "+iso.String()+": bash commands run WITHOUT "+
			"kernel isolation: they share the host's network and file system (whatever the worker's user may read: its config file, "+
			"its data directory) and only the exec policy, a cleared environment, the rlimits and a non-dumpable worker stand in their way",
			"limits", sc.Limits.String())
	default:
		bt.refuse = fmt.Sprintf("bash is disabled on this tool worker: it cannot isolate commands (%s), and running them unisolated "+
			"would expose the worker's secrets. The operator must install bubblewrap and allow it user namespaces (deploy/seccomp-toolworker.json "+
			"in Docker) or, knowingly, set ai.agent.sandbox.allowUnisolated: true. Do not retry.", iso.Reason)
		cfg.Log.Error("BASH DISABLED: " + bt.refuse)
	}
	return bt, nil
}

// Names lists every built-in tool name.
var Names = []string{"read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "bash",
	"web_fetch", "web_search", "ask_user", "activate_skill", "install_skill"}

// All builds the built-in tools cfg allows.
func All(cfg Config) ([]tools.Tool, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	for _, n := range append(slices.Clone(cfg.Enabled), cfg.Disabled...) {
		if !slices.Contains(Names, n) {
			return nil, fmt.Errorf("builtin: unknown tool %q in ai.tools (known: %v)", n, Names)
		}
	}
	if cfg.Guard == nil {
		cfg.Guard = netguard.MustNew(netguard.Config{})
	}
	if cfg.BashTimeout <= 0 {
		cfg.BashTimeout = 30 * time.Second
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 2 << 20
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = 30 * time.Second
	}
	if cfg.InstallSkillRoles == nil {
		cfg.InstallSkillRoles = []string{tools.RoleMaster, tools.RoleTrusted}
	}
	var out []tools.Tool
	if cfg.Files != nil {
		f := fileTools{fp: cfg.Files}
		out = append(out, f.readFile(), f.writeFile(), f.editFile(), f.listDir(), f.glob(), f.grep())
		if cfg.Exec != nil {
			bt, err := newBashTool(cfg)
			if err != nil {
				return nil, err
			}
			out = append(out, bt.tool())
		}
	} else if cfg.Exec != nil {
		return nil, errors.New("builtin: bash needs Files (the workspace policy)")
	}
	out = append(out, webFetch{guard: cfg.Guard, maxBytes: cfg.FetchMaxBytes, timeout: cfg.FetchTimeout}.tool())
	if cfg.Search != nil {
		out = append(out, webSearchTool(cfg.Search))
	}
	out = append(out, askUserTool())
	if cfg.Skills != nil {
		st := skillTools{store: cfg.Skills, dir: cfg.SkillsDir, guard: cfg.Guard, sizeHint: cfg.ModelSizeHint,
			maxChars: cfg.SkillInstructionMaxChars, installRole: cfg.InstallSkillRoles}
		out = append(out, st.activate())
		if cfg.SkillsDir != "" {
			out = append(out, st.install())
		}
	}
	var kept []tools.Tool
	for _, t := range out {
		if slices.Contains(cfg.Disabled, t.Name) || (len(cfg.Enabled) > 0 && !slices.Contains(cfg.Enabled, t.Name)) {
			continue
		}
		kept = append(kept, t)
	}
	return kept, nil
}
