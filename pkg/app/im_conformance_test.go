package app_test

import (
	"fmt"
	"testing"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/im/console/consoletest"
	"github.com/agentbus/agentbus/pkg/im/discord/discordtest"
	"github.com/agentbus/agentbus/pkg/im/imtest"
	"github.com/agentbus/agentbus/pkg/im/matrix/matrixtest"
	"github.com/agentbus/agentbus/pkg/im/onebot/onebottest"
	"github.com/agentbus/agentbus/pkg/im/slack/slacktest"
	"github.com/agentbus/agentbus/pkg/im/telegram/telegramtest"
	"github.com/agentbus/agentbus/pkg/im/webhook/webhooktest"
)

// TestIMConformance runs the platform conformance suite (pkg/im/imtest) against every
// registered platform, each on a pipeline of its own with every role running. Run one with
// -run 'TestIMConformance/telegram'.
func TestIMConformance(t *testing.T) {
	adapters := []imtest.Adapter{
		webhooktest.Conformance(),
		consoletest.Conformance(),
		onebottest.Conformance(),
		telegramtest.Conformance(),
		discordtest.Conformance(),
		slacktest.Conformance(),
		matrixtest.Conformance(),
	}
	// Every registered platform is under the suite.
	seen := map[string]bool{}
	for _, a := range adapters {
		seen[a.Platform] = true
	}
	for _, name := range app.Platforms.Names() {
		if !seen[name] {
			t.Errorf("platform %s is registered but not under the conformance suite", name)
		}
	}
	for _, a := range adapters {
		t.Run(a.Platform, func(t *testing.T) { imtest.Run(t, a, startPipeline) })
	}
}

// startPipeline is imtest.Start over app.Start: one process, every role, embedded NATS.
func startPipeline(t *testing.T, im, modelURL string) imtest.Pipeline {
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[2]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, modelURL)
	if im != "" {
		yml += "im:\n" + im
	}
	p := startProc(t, yml, app.AllRoles)
	return imtest.Pipeline{NC: p.NC, JS: p.JS, WebhookURL: p.WebhookURL}
}
