// Package benchutil holds what the store benchmarks share: the raw JetStream baseline that every
// figure is printed next to.
package benchutil

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// BaselinePublish is raw JetStream PublishAsync throughput (acked messages per second) into a
// throwaway file stream on the same server and connection, in windows of 1000 in-flight
// messages. (natsutil.BaselinePublish issues all n at once and stalls beyond nats.go's 4000
// outstanding async publishes.)
func BaselinePublish(ctx context.Context, js jetstream.JetStream, n, size int) (float64, error) {
	name := "BASELINE_" + nuid.Next()
	subj := "baseline." + name
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage}); err != nil {
		return 0, fmt.Errorf("baseline stream: %w", err)
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), name)
	payload := []byte(strings.Repeat("x", size))
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync(subj, payload); err != nil {
			return 0, fmt.Errorf("baseline publish: %w", err)
		}
		if i%1000 == 999 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
