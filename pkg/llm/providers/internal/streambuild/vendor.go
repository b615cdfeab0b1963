package streambuild

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/vendorkey"
)

// Vendor describes a provider that talks to one vendor's API with an API key.
type Vendor struct {
	// Name prefixes the provider's errors ("anthropic", "google", "openai-responses").
	Name string
	// DefaultBaseURL is used when the model has no BaseURL; the key variables below are only
	// read for a model on this URL's host.
	DefaultBaseURL string
	// KeyEnv lists the environment variables read, in order, when opts.APIKey is empty.
	KeyEnv []string
}

// Stream is the prologue the vendor providers share: it makes opts non-nil, starts a
// Builder, finds the API key (opts.APIKey, else the vendor's variables for the vendor's own
// endpoint) and fails the stream with a clear error when there is none. Then run streams the
// response into b; whatever run does, the llm contract's single done-or-error is b's to emit.
func (v Vendor) Stream(ctx context.Context, model *llm.Model, opts *llm.StreamOptions,
	run func(b *Builder, key string, opts *llm.StreamOptions)) iter.Seq[llm.Event] {
	if opts == nil {
		opts = &llm.StreamOptions{}
	}
	return func(yield func(llm.Event) bool) {
		b := New(model, yield)
		key := opts.APIKey
		if key == "" {
			key = vendorkey.FromEnv(model.BaseURL, v.DefaultBaseURL, v.KeyEnv...)
		}
		if key == "" {
			b.Fail(ctx, fmt.Errorf("%s: no API key (set the provider's apiKey or %s)", v.Name, strings.Join(v.KeyEnv, " or ")))
			return
		}
		run(b, key, opts)
	}
}
