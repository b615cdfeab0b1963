package builtin

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/netguard"
	"github.com/agentbus/agentbus/pkg/sandbox"
	"github.com/agentbus/agentbus/pkg/skills"
)

// FromConfig builds a Config from the ai: block: bash limits (ai.agent.bashTimeoutMs,
// bashOutputLimit), the SSRF guard and limits of web_fetch (ai.agent.webFetch), the web_search
// backend (ai.agent.webSearch), the skills directory and sizing (skillsDir, modelSizeHint,
// skillInstructionMaxChars) and ai.tools.enabled/disabled. files, exec and store come from
// their own packages (filepolicy.New, execpolicy.FromConfig, skills.NewStore); nil leaves out
// the tools that need them.
func FromConfig(ai config.AI, files *filepolicy.Policy, exec ExecChecker, store *skills.Store) (Config, error) {
	a := ai.Agent
	guard, err := netguard.New(netguard.Config{AllowPrivate: a.WebFetch.AllowPrivate, AllowHosts: a.WebFetch.AllowHosts})
	if err != nil {
		return Config{}, fmt.Errorf("ai.agent.webFetch: %w", err)
	}
	search, err := NewSearchBackend(a.WebSearch)
	if err != nil {
		return Config{}, err
	}
	c := Config{
		Files: files, Guard: guard, Search: search, Skills: store,
		BashTimeout:     time.Duration(a.BashTimeoutMs) * time.Millisecond,
		BashOutputLimit: a.BashOutputLimit,
		FetchMaxBytes:   a.WebFetch.MaxBytes,
		FetchTimeout:    time.Duration(a.WebFetch.TimeoutMs) * time.Millisecond,
		ModelSizeHint:   a.ModelSizeHint, SkillInstructionMaxChars: a.SkillInstructionMaxChars,
		Enabled: ai.Tools.Enabled, Disabled: ai.Tools.Disabled,
	}
	if c.Sandbox, err = SandboxFromConfig(a); err != nil {
		return Config{}, err
	}
	if exec != nil {
		c.Exec = exec
	}
	if store != nil {
		c.SkillsDir = a.SkillsDir
	}
	return c, nil
}

// SandboxFromConfig maps ai.agent.sandbox (and execPreset, which picks the network when
// sandbox.network is auto: outbound for the network preset, none for every other) to the bash
// tool's SandboxConfig.
func SandboxFromConfig(a config.Agent) (SandboxConfig, error) {
	s := a.Sandbox
	sc := SandboxConfig{AllowUnisolated: s.AllowUnisolated, Limits: sandbox.Limits{
		Processes: s.Limits.Processes, MemoryMiB: s.Limits.MemoryMiB, CPUSeconds: s.Limits.CPUSeconds,
		OpenFiles: s.Limits.OpenFiles, TmpMiB: s.Limits.TmpMiB, FileMiB: s.Limits.FileMiB}}
	switch s.Network {
	case "", "auto":
		if a.ExecPreset == "network" {
			sc.Network = sandbox.NetworkOutbound
		}
	default:
		n, err := sandbox.ParseNetwork(s.Network)
		if err != nil || n == sandbox.NetworkHost {
			return sc, fmt.Errorf("ai.agent.sandbox.network %q: want auto, none or outbound", s.Network)
		}
		sc.Network = n
	}
	for _, n := range s.AllowNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return sc, fmt.Errorf("ai.agent.sandbox.allowNetworks: %w", err)
		}
		sc.AllowNets = append(sc.AllowNets, p)
	}
	if s.RunAs != "" {
		u, g, _ := strings.Cut(s.RunAs, ":")
		uid, err1 := strconv.ParseUint(u, 10, 32)
		gid, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || err2 != nil {
			return sc, fmt.Errorf("ai.agent.sandbox.runAs %q: want numeric uid:gid", s.RunAs)
		}
		sc.RunAs = &sandbox.Credential{UID: uint32(uid), GID: uint32(gid)}
	}
	return sc, nil
}
