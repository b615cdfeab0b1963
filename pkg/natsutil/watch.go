package natsutil

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// NextUpdate returns w's next entry (nil marks the end of the initial values), or false once
// ctx has ended or the watch has closed. It does not wait for the channel to close when ctx
// ends: nats.go unsubscribes a watch when its ctx ends, but installs the handler that closes
// the channel only after the subscribe returned, so a ctx that ends right after the watch
// started can leave the channel open for good.
func NextUpdate(ctx context.Context, w jetstream.KeyWatcher) (jetstream.KeyValueEntry, bool) {
	select {
	case <-ctx.Done():
		return nil, false
	case e, ok := <-w.Updates():
		return e, ok
	}
}
