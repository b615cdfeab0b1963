package app_test

import (
	"fmt"
	"testing"

	"github.com/agentbus/agentbus/pkg/app"
)

// startTakeoverCore is the setup every adapter's takeover test shares: a core process (turn
// worker, tool worker and egress on an embedded NATS server that wants a token) and a function
// that starts an ingest replica against it, each with im as the block under "im:" and the
// model at modelURL. The test kills a replica by closing its NATS connection.
func startTakeoverCore(t *testing.T, im, modelURL string) (core *app.Process, ingest func(name string) *app.Process) {
	t.Helper()
	dir := tempDir(t)
	const natsToken = "bus-token-for-tests"
	common := fmt.Sprintf(`
im:
%s
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, im, modelURL)
	core = startProc(t, fmt.Sprintf(`
dataDir: %[1]s/core
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory, token: %[2]s}
`, dir, natsToken)+common, app.Roles{TurnWorker: true, ToolWorker: true, Egress: true})
	url := core.Embedded.ClientURL()
	return core, func(name string) *app.Process {
		yml := fmt.Sprintf("dataDir: %s/%s\nnats: {url: %q, token: %s, storage: memory}\n", dir, name, url, natsToken) + common
		return startProc(t, yml, app.Roles{Ingest: true})
	}
}
