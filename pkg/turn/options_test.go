package turn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

// New refuses unusable Options with ErrConfig naming the field, before it touches the bus
// (nc and js are nil here).
func TestNewRejectsInvalidOptions(t *testing.T) {
	reg, err := llm.NewRegistry(nil)
	if err != nil {
		t.Fatal(err)
	}
	route := func([]string) (*llm.Model, error) { return nil, errors.New("unused") }
	tests := []struct {
		name   string
		mutate func(*Options)
		field  string
	}{
		{"no models", func(o *Options) { o.Models = nil }, "Models"},
		{"no route", func(o *Options) { o.Route = nil }, "Route"},
		{"lease under a second", func(o *Options) { o.LeaseTTL = 500 * time.Millisecond }, "LeaseTTL"},
		{"unknown policy", func(o *Options) { o.Concurrency = "fifo" }, "Concurrency"},
		{"unknown steering mode", func(o *Options) { o.SteeringMode = "some" }, "SteeringMode"},
		{"negative rate limit", func(o *Options) { o.RateLimit.PerHour = -1 }, "RateLimit"},
		{"negative tool timeout", func(o *Options) { o.ToolTimeout = -time.Second }, "ToolTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{Models: reg, Route: route}
			tt.mutate(&o)
			_, err := New(context.Background(), nil, nil, o)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("New: %v; want ErrConfig naming %s", err, tt.field)
			}
		})
	}
}

// Zero Options take the documented defaults; negative bounds that mean "none" stay negative.
func TestOptionsDefaults(t *testing.T) {
	var o Options
	o.History.MaxHistory = -1
	o.TurnTimeout = -1
	o.setDefaults()
	checks := []struct {
		name      string
		got, want any
	}{
		{"LeaseTTL", o.LeaseTTL, DefaultLeaseTTL},
		{"ToolTimeout", o.ToolTimeout, DefaultToolTimeout},
		{"TurnTimeout (negative: no bound)", o.TurnTimeout, time.Duration(-1)},
		{"CollectWindow", o.CollectWindow, DefaultCollectWindow},
		{"Concurrency", o.Concurrency, DefaultConcurrency},
		{"FollowUpMode", o.FollowUpMode, DefaultQueueMode},
		{"MaxHistory (negative: no bound)", o.History.MaxHistory, -1},
		{"ColdStartMaxMessages (default MaxHistory)", o.History.ColdStartMaxMessages, -1},
		{"IdleArchive", o.History.IdleArchive, DefaultSessionIdleArchive},
		{"KeepRecentTokens", o.Compaction.KeepRecentTokens, DefaultKeepRecentTokens},
		{"MaxRecentMessages", o.History.Legacy.MaxRecentMessages, DefaultMaxRecentMessages},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !strings.HasPrefix(o.ID, "tw-") || o.Log == nil {
		t.Errorf("ID %q, Log %v: want a random tw- id and the default logger", o.ID, o.Log)
	}
}

// Run is New and Start on Options.NC: the worker answers a message, and Stop ends it (Done
// closes). Without NC, Run fails with ErrConfig.
func TestRunLifecycle(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo))
	if _, err := Run(context.Background(), h.options("w0")); !errors.Is(err, ErrConfig) {
		t.Fatalf("Run without NC: %v; want ErrConfig", err)
	}
	o := h.options("w1")
	o.NC = h.ns.NC
	w, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	h.send(sk, "m1", "hello")
	h.replies(sk, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Done():
	default:
		t.Fatal("Done is open after Stop returned")
	}
}
