package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/agentbus/agentbus/pkg/im"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// A generated image referenced as media://<name> reaches a webhook platform inline, because
// the platform cannot read the bus's object store.
func TestMediaImageInlinedForWebhook(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, nil)
	start(t, fastOptions(srv, testConfig(cb), t))
	media, err := srv.JS.ObjectStore(context.Background(), events.ObjectMedia)
	if err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG fake image bytes")
	if _, err := media.Put(context.Background(), jetstream.ObjectMeta{Name: "abc.png", Headers: nats.Header{"Content-Type": []string{"image/png"}}}, bytes.NewReader(png)); err != nil {
		t.Fatal(err)
	}
	out := outbound("o-media")
	out.Content = events.Segments{events.ImageSeg(im.MediaScheme + "abc.png")}
	publish(t, srv.JS, out, "o-media")
	select {
	case <-cb.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	var body webhook.Outbound
	if err := json.Unmarshal(cb.get(0).body, &body); err != nil {
		t.Fatal(err)
	}
	d := body.Content[0].Data
	if d["object"] != "abc.png" || d["mimeType"] != "image/png" || d["url"] != nil {
		t.Fatalf("segment data = %v", d)
	}
	if d["base64"] != "iVBORyBmYWtlIGltYWdlIGJ5dGVz" {
		t.Errorf("base64 = %v", d["base64"])
	}
}
