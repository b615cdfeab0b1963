package natsutil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// BaselinePublish measures raw JetStream throughput on the same server and connection: it
// creates a throwaway stream (file storage, 1 replica), publishes n messages of size bytes
// with PublishAsync (as many in flight as js allows), waits for every ack, deletes the stream
// and returns acknowledged messages per second. Benchmarks print it next to their own figures
// so a reader can tell the store's overhead from the machine's speed.
func BaselinePublish(ctx context.Context, js jetstream.JetStream, n int, size int) (float64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("baseline: n must be positive")
	}
	if size < 0 {
		size = 0
	}
	id := nuid.Next()
	name := "BASELINE_" + id
	subj := "agentbus.baseline." + id
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage, Replicas: 1,
	}); err != nil {
		return 0, fmt.Errorf("baseline: create stream: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, name)
	}()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	start := time.Now()
	for i := 0; i < n; {
		_, err := js.PublishAsync(subj, payload, jetstream.WithStallWait(time.Second))
		switch {
		case err == nil:
			i++
		case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
			// The in-flight window is full for longer than the stall wait (a loaded machine):
			// wait for acks to drain instead of failing the measurement.
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("baseline: publish %d: %w", i, err)
			}
		default:
			return 0, fmt.Errorf("baseline: publish %d: %w", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, fmt.Errorf("baseline: waiting for acks: %w", ctx.Err())
	}
	elapsed := time.Since(start)
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("baseline: stream info: %w", err)
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(n) {
		return 0, fmt.Errorf("baseline: stream holds %d of %d messages", got, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}
