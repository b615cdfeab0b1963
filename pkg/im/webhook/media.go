package webhook

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// maxInlineMedia caps an object inlined into a webhook body.
const maxInlineMedia = 8 << 20

// inlineMedia replaces media:// image references with the object's bytes (data.base64 and
// data.mimeType), because a platform behind a webhook cannot reach the bus's object store.
// The original reference stays in data.object.
func inlineMedia(ctx context.Context, store jetstream.ObjectStore, content events.Segments) (events.Segments, error) {
	if store == nil {
		return content, nil
	}
	var out events.Segments
	for i, s := range content {
		name, ok := strings.CutPrefix(s.MediaRef(), im.MediaScheme)
		if !ok || !s.IsMedia() {
			continue
		}
		if out == nil {
			out = append(events.Segments(nil), content...)
		}
		info, err := store.GetInfo(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("media %s: %w", name, err)
		}
		if info.Size > maxInlineMedia {
			return nil, fmt.Errorf("media %s is %d bytes, over the %d inline limit", name, info.Size, maxInlineMedia)
		}
		b, err := store.GetBytes(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("media %s: %w", name, err)
		}
		d := maps.Clone(s.Data)
		delete(d, "url")
		d["object"] = name
		d["base64"] = base64.StdEncoding.EncodeToString(b)
		if ct := info.Headers.Get("Content-Type"); ct != "" {
			d["mimeType"] = ct
		}
		out[i] = events.Segment{Type: s.Type, Data: d}
	}
	if out == nil {
		return content, nil
	}
	return out, nil
}
