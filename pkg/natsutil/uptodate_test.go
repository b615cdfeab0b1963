package natsutil

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// After one Provision, every stream and bucket reads as up to date, so the next process's
// Provision sends no create-or-update; after a spec change, the changed one does not.
func TestProvisionedIsUpToDate(t *testing.T) {
	e, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := events.Spec{}.WithDefaults()
	if err := Provision(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	for _, c := range spec.Streams() {
		if !upToDate(ctx, js, c.Name, func(h jetstream.StreamConfig) bool { return sameStream(h, c) }) {
			t.Errorf("stream %s not up to date after provisioning", c.Name)
		}
	}
	for _, c := range spec.KeyValues() {
		if !upToDate(ctx, js, "KV_"+c.Bucket, func(h jetstream.StreamConfig) bool { return sameKV(h, c) }) {
			t.Errorf("kv %s not up to date after provisioning", c.Bucket)
		}
	}
	for _, c := range spec.ObjectStores() {
		if !upToDate(ctx, js, "OBJ_"+c.Bucket, func(h jetstream.StreamConfig) bool { return sameObjectStore(h, c) }) {
			t.Errorf("object store %s not up to date after provisioning", c.Bucket)
		}
	}
	changed := spec
	changed.IMInMaxAge = spec.IMInMaxAge + time.Hour
	c := changed.IMInStream()
	if upToDate(ctx, js, c.Name, func(h jetstream.StreamConfig) bool { return sameStream(h, c) }) {
		t.Errorf("IM_IN with a new max age reads as up to date")
	}
}
