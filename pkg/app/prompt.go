package app

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/memory"
	"github.com/agentbus/agentbus/pkg/output"
	"github.com/agentbus/agentbus/pkg/toolworker"
	"github.com/agentbus/agentbus/pkg/turn"
)

// bootstrapFiles are injected into the system prompt in this order (seed: SOUL → AGENTS →
// TOOLS), each capped, looked up in the data directory and then the working directory.
var bootstrapFiles = []struct {
	name  string
	limit int
}{{"SOUL.md", 8 << 10}, {"AGENTS.md", 16 << 10}, {"TOOLS.md", 8 << 10}}

// bootstrapTotal caps the bootstrap files together.
const bootstrapTotal = 32 << 10

// promptSources contributes the bootstrap files, the memory files and the sender's profile.
type promptSources struct {
	profiles *toolworker.ProfileCache
	dataDir  string
	memory   *memory.Store // nil: no Memory section

	mu      sync.Mutex
	cached  []turn.Section
	checked time.Time
}

func (p *promptSources) Sections(ctx context.Context, m events.IMMessage) []turn.Section {
	out := append([]turn.Section(nil), p.bootstrap()...)
	if p.memory != nil {
		if body := p.memory.Section(); body != "" {
			out = append(out, turn.Section{Title: "Memory", Body: "Notes you saved earlier (memory/MEMORY.md and the daily notes):\n" + body})
		}
	}
	if body := output.PromptFor(m.Platform); body != "" { // only where cards render
		out = append(out, turn.Section{Title: "Cards", Body: body})
	}
	if s, err := p.profiles.Summary(ctx, m.Platform, m.Sender.ID); err == nil && s != "" {
		out = append(out, turn.Section{Title: "User profile", Body: s})
	}
	return out
}

// bootstrap re-reads the files at most every 10 seconds, so edits apply without a restart.
func (p *promptSources) bootstrap() []turn.Section {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.checked) < 10*time.Second {
		return p.cached
	}
	p.checked = time.Now()
	p.cached = nil
	total := bootstrapTotal
	for _, f := range bootstrapFiles {
		for _, dir := range []string{p.dataDir, "."} {
			b, err := os.ReadFile(filepath.Join(dir, f.name))
			if err != nil {
				continue
			}
			body := memory.Cap(string(b), min(f.limit, total)) // never cuts a UTF-8 character
			if f.name == memory.Agents {
				body = identity.SanitizeText(body) // the model may write it (memory_write), from any chat
			}
			total -= len(body)
			if body == "" {
				break
			}
			p.cached = append(p.cached, turn.Section{Title: f.name, Body: body})
			break
		}
	}
	return p.cached
}
