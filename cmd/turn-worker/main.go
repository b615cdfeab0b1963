// Command turn-worker runs agentbus's turn-worker role against a NATS server (nats.url or --nats).
// Run any number of replicas; see docs/cluster.md.
package main

import (
	"os"

	"github.com/agentbus/agentbus/cmd/internal/rolemain"
	"github.com/agentbus/agentbus/pkg/app"
)

func main() { os.Exit(rolemain.Main("turn-worker", app.Roles{TurnWorker: true})) }
