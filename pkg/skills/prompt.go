package skills

import (
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/tools"
)

// PromptSection renders the selected skills for the system prompt: one line each with the
// name and description, and how to load one. It returns "" for no skills.
func PromptSection(selected []*Skill) string {
	if len(selected) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Skills\n\nThese skills match the request. Call activate_skill with the skill's name to load its instructions before using it.\n\n")
	for _, s := range selected {
		fmt.Fprintf(&b, "- %s: %s", s.Name, s.Description)
		if len(s.Tools) > 0 {
			fmt.Fprintf(&b, " (tools: %s)", strings.Join(s.Tools, ", "))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// SkillIterationBonus is added to maxIterations when skill tools are offered (seed
// "自适应 maxIterations"): activating or installing a skill costs steps of their own.
const SkillIterationBonus = 3

// AdjustMaxIterations returns maxIterations plus SkillIterationBonus when ts contains
// activate_skill or install_skill.
func AdjustMaxIterations(maxIterations int, ts []tools.Tool) int {
	for _, t := range ts {
		if t.Name == "activate_skill" || t.Name == "install_skill" {
			return maxIterations + SkillIterationBonus
		}
	}
	return maxIterations
}
