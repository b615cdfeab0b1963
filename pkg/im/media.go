package im

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/netguard"
)

// MediaScheme marks a reference into the media object store (media://<name>), as egress and
// the image tool write them.
const MediaScheme = "media://"

// MaxMedia caps one inbound attachment stored in the media object store.
const MaxMedia = 25 << 20

// Media stores inbound attachments in the media object store. Downloads go through an SSRF
// guard that additionally allows the hosts of the platform's own configured endpoints (a
// OneBot implementation on the same machine serves images from 127.0.0.1), so every other
// URL in a message is still checked: a message cannot make the bot fetch from the private
// network.
type Media struct {
	Store jetstream.ObjectStore
	guard *netguard.Guard
}

// NewMedia returns a media helper for store. base is the web-fetch policy
// (ai.agent.webFetch); endpoints are the platform's configured URLs (apiBase), whose hosts
// are allowed.
func NewMedia(store jetstream.ObjectStore, base netguard.Config, endpoints ...string) (*Media, error) {
	cfg := base
	cfg.AllowHosts = append([]string(nil), base.AllowHosts...)
	for _, e := range endpoints {
		if e == "" {
			continue
		}
		u, err := url.Parse(e)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("im: endpoint %q is not a URL", e)
		}
		cfg.AllowHosts = append(cfg.AllowHosts, u.Hostname())
	}
	g, err := netguard.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Media{Store: store, guard: g}, nil
}

// Client returns an HTTP client through the same guard, for platform APIs that hand out
// file URLs (Telegram's getFile).
func (m *Media) Client() *http.Client { return m.guard.Client(0) }

// Fetch downloads rawURL through the guard and stores it as name; it returns the stored
// object's size and content type.
func (m *Media) Fetch(ctx context.Context, rawURL, name string) (int64, string, error) {
	res, err := m.guard.Fetch(ctx, rawURL, netguard.FetchOptions{MaxBytes: MaxMedia + 1, Accept: "*/*", UserAgent: "agentbus-im/1.0"})
	if err != nil {
		return 0, "", fmt.Errorf("fetch media: %w", err)
	}
	if res.Status < 200 || res.Status > 299 {
		return 0, "", fmt.Errorf("fetch media: HTTP %d", res.Status)
	}
	if res.Truncated || len(res.Body) > MaxMedia {
		return 0, "", fmt.Errorf("fetch media: over %d bytes", MaxMedia)
	}
	return m.Put(ctx, name, res.Body, res.ContentType)
}

// Put stores b as name.
func (m *Media) Put(ctx context.Context, name string, b []byte, contentType string) (int64, string, error) {
	if m == nil || m.Store == nil {
		return 0, "", errors.New("im: no media store")
	}
	if contentType == "" {
		contentType = http.DetectContentType(b)
	}
	meta := jetstream.ObjectMeta{Name: name, Headers: map[string][]string{"Content-Type": {contentType}}}
	if _, err := m.Store.Put(ctx, meta, bytes.NewReader(b)); err != nil {
		return 0, "", fmt.Errorf("store media %s: %w", name, err)
	}
	return int64(len(b)), contentType, nil
}

// StoreSegment fetches a media segment's url into the store as name and returns the segment
// with data.object = name and data.url = media://name (the platform URL moves to
// data.sourceUrl). A fetch that fails leaves the segment as it was, with data.error saying
// why, so the message still gets through.
func (m *Media) StoreSegment(ctx context.Context, s events.Segment, rawURL, name string) events.Segment {
	d := maps.Clone(s.Data)
	if d == nil {
		d = map[string]any{}
	}
	size, ct, err := m.Fetch(ctx, rawURL, name)
	if err != nil {
		d["error"] = err.Error()
		if d["url"] == nil && d["file"] == nil {
			d["url"] = rawURL
		}
		return events.Segment{Type: s.Type, Data: d}
	}
	d["sourceUrl"] = rawURL
	d["url"] = MediaScheme + name
	d["object"] = name
	d["size"] = size
	d["mimeType"] = ct
	return events.Segment{Type: s.Type, Data: d}
}

// Load returns a media:// reference's bytes and content type; ok is false when ref is not a
// media:// reference.
func (m *Media) Load(ctx context.Context, ref string) (b []byte, contentType string, ok bool, err error) {
	name, isRef := strings.CutPrefix(ref, MediaScheme)
	if !isRef {
		return nil, "", false, nil
	}
	if m == nil || m.Store == nil {
		return nil, "", true, errors.New("im: no media store")
	}
	info, err := m.Store.GetInfo(ctx, name)
	if err != nil {
		return nil, "", true, fmt.Errorf("media %s: %w", name, err)
	}
	if info.Size > MaxMedia {
		return nil, "", true, fmt.Errorf("media %s is %d bytes, over %d", name, info.Size, MaxMedia)
	}
	b, err = m.Store.GetBytes(ctx, name)
	if err != nil {
		return nil, "", true, fmt.Errorf("media %s: %w", name, err)
	}
	return b, info.Headers.Get("Content-Type"), true, nil
}
