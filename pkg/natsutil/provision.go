package natsutil

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Provision creates or updates every stream, KV bucket and object store of spec (see
// events.Spec), so that after it returns they all exist with the configured replicas, storage
// and ages. It is idempotent and safe when many processes run it at the same time: a create
// that loses the race to another process ("stream name already in use") is retried as an
// update, and transient API errors (timeouts, JetStream not ready yet in a starting cluster,
// no peers for placement while the cluster forms) are retried with jittered backoff until ctx
// ends. Each request gets its own timeout (RequestTimeout, shorter when ctx ends sooner), so one
// request the forming cluster never answers costs a few seconds, not the whole of ctx: seven
// role processes started at once against a fresh three-node cluster all come up.
//
// ctx bounds the whole provisioning; a failure leaves whatever was already created in place
// (the next Provision finishes the job).
//
// Changes the server cannot apply in place (storage type, work-queue retention, a replica
// count a single server cannot host) are errors wrapping ErrProvision that name the stream.
func Provision(ctx context.Context, js jetstream.JetStream, spec events.Spec) error {
	spec = spec.WithDefaults()
	for _, cfg := range spec.Streams() {
		if err := retry(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateStream(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("%w: stream %s: %w", ErrProvision, cfg.Name, err)
		}
	}
	for _, cfg := range spec.KeyValues() {
		if err := retry(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateKeyValue(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("%w: kv %s: %w", ErrProvision, cfg.Bucket, err)
		}
	}
	for _, cfg := range spec.ObjectStores() {
		if err := retry(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateObjectStore(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("%w: object store %s: %w", ErrProvision, cfg.Bucket, err)
		}
	}
	return nil
}

// RequestTimeout bounds one provisioning request (one create-or-update); a request that gets
// no answer in that time is retried.
const RequestTimeout = 5 * time.Second

// maxAttempts bounds the attempts per stream or bucket when ctx has no deadline.
const maxAttempts = 60

// retry runs op, each time with its own RequestTimeout, until it succeeds, fails with a
// permanent error, or ctx ends.
func retry(ctx context.Context, op func(context.Context) error) error {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, RequestTimeout)
		err := op(actx)
		cancel()
		if err == nil || !retriable(err) {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		if attempt >= maxAttempts {
			return fmt.Errorf("after %d attempts: %w", attempt, err)
		}
		// Full jitter: processes that collided once do not collide again in step.
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		if wait *= 2; wait > 2*time.Second {
			wait = 2 * time.Second
		}
	}
}

// retriable reports errors that another attempt may not repeat: a lost create race (the
// other process created it between our update and create, so the next update finds it) and
// transient API trouble.
func retriable(err error) bool {
	switch {
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse),
		errors.Is(err, jetstream.ErrBucketExists),
		errors.Is(err, jetstream.ErrStreamNotFound), // deleted between update and create
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 503: JetStream temporarily unavailable (cluster forming, leader election); 10005:
		// no peers for placement yet (the cluster has not seen every server).
		return apiErr.Code == 503 || apiErr.ErrorCode == 10005
	}
	return false
}
