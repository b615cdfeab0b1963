package turn

import "github.com/agentbus/agentbus/pkg/config"

// TaskConfig is the ai: block as the background-task runners (background.go, subagent.go,
// deferred.go) still read it. It is the one configuration type left in pkg/turn, and it
// leaves with those runners when they move to pkg/tasks (issue 38); the layering test
// (internal/layering) lists this file and background.go as the only ones allowed to import
// pkg/config until then.
type TaskConfig = config.AI
