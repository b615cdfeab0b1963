package natsutil

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// openWatch is a watch whose channel nobody closes: what nats.go leaves when the watch's ctx
// ends before the handler that closes it is installed.
type openWatch struct{ ch chan jetstream.KeyValueEntry }

func (w openWatch) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w openWatch) Stop() error                             { return nil }

func TestNextUpdate(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan jetstream.KeyValueEntry)
	close(closed)
	marker := make(chan jetstream.KeyValueEntry, 1)
	marker <- nil
	cases := []struct {
		name   string
		ctx    context.Context
		w      openWatch
		wantOK bool
	}{
		{"ctx ended, channel left open", ended, openWatch{make(chan jetstream.KeyValueEntry)}, false},
		{"channel closed", context.Background(), openWatch{closed}, false},
		{"end of the initial values", context.Background(), openWatch{marker}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, ok := NextUpdate(c.ctx, c.w)
			if ok != c.wantOK || e != nil {
				t.Fatalf("NextUpdate = %v, %v; want nil, %v", e, ok, c.wantOK)
			}
		})
	}
}
