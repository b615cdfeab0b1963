// Command egress runs agentbus's egress role against a NATS server (nats.url or --nats).
// Run any number of replicas; see docs/cluster.md.
package main

import (
	"os"

	"github.com/agentbus/agentbus/cmd/internal/rolemain"
	"github.com/agentbus/agentbus/pkg/app"
)

func main() { os.Exit(rolemain.Main("egress", app.Roles{Egress: true})) }
