package builtin

import (
	"fmt"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/netguard"
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
	if exec != nil {
		c.Exec = exec
	}
	if store != nil {
		c.SkillsDir = a.SkillsDir
	}
	return c, nil
}
