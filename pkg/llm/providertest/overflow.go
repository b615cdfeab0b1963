package providertest

import (
	"regexp"

	"github.com/agentbus/agentbus/pkg/llm"
)

// TODO: switch to llm.IsContextOverflow once it lands in pkg/llm.
var overflowRE = regexp.MustCompile(`(?i)prompt is too long|exceeds the context window|input token count.*exceeds the maximum|maximum context length|context[_ ]length[_ ]exceeded|exceeds the available context size|prompt too long|input length .*exceeds`)

func isContextOverflow(m *llm.Message, contextWindow int) bool {
	if m.StopReason == llm.StopReasonError && overflowRE.MatchString(m.ErrorMessage) {
		return true
	}
	return contextWindow > 0 && m.Usage != nil && m.Usage.Input+m.Usage.CacheRead > contextWindow
}
