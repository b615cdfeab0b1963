package app

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/ingest"
)

// The YAML blocks reach the roles' typed Options unchanged in meaning: milliseconds become
// durations, the "enabled: true" style of the file becomes the roles' zero-is-default flags,
// and an explicit empty list stays empty (none) instead of taking the default.
func TestRoleOptionsFromConfig(t *testing.T) {
	tests := []struct {
		name       string
		yaml       string
		wantIngest ingest.Options
		wantEgress egress.Options
	}{
		{"defaults", ``,
			ingest.Options{Trigger: ingest.Trigger{Prefixes: []string{"ai:"}, IgnorePrefixes: ingest.DefaultIgnorePrefixes}},
			egress.Options{}},
		{"everything set", `
ai:
  trigger: {enabled: false, respondToPrivate: false, respondToAt: false, prefixes: [], ignorePrefixes: ["#"], masters: [m], trusted: [t]}
  dispatcher: {mode: dual, order: ai-first, allowDualReply: true}
im:
  egress: {concurrency: 4, ackWaitMs: 2500, maxRetries: 1, maxDeliveries: 3, rateLimits: {"*": {perSecond: 2, burst: 1}}}
`,
			ingest.Options{
				Trigger: ingest.Trigger{Off: true, PrivateNeedsPrefix: true, IgnoreMentions: true, Prefixes: []string{},
					IgnorePrefixes: []string{"#"}, Masters: []string{"m"}, Trusted: []string{"t"}},
				Dispatch: ingest.Dispatch{Dual: true, AIFirst: true, AllowDualReply: true}},
			egress.Options{Concurrency: 4, AckWait: 2500 * time.Millisecond, MaxRetries: 1, MaxDeliveries: 3,
				RateLimits: map[string]egress.RateLimit{"*": {PerSecond: 2, Burst: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := ingestOptions(cfg.AI, nil, nil); !reflect.DeepEqual(got, tt.wantIngest) {
				t.Errorf("ingest options\n got %+v\nwant %+v", got, tt.wantIngest)
			}
			if got := withEgressTuning(cfg.IM.Egress, egress.Options{}); !reflect.DeepEqual(got, tt.wantEgress) {
				t.Errorf("egress options\n got %+v\nwant %+v", got, tt.wantEgress)
			}
		})
	}
}
