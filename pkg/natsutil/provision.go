package natsutil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Provision creates or updates every stream, KV bucket and object store of spec (see
// events.Spec), so that after it returns they all exist with the configured replicas, storage
// and ages. It is idempotent and safe when many processes run it at the same time: a create
// that loses the race to another process ("stream name already in use") is retried as an
// update, and transient API errors (timeouts, JetStream not ready yet in a starting cluster)
// are retried with backoff until ctx ends.
//
// Changes the server cannot apply in place (storage type, work-queue retention, a replica
// count a single server cannot host) are errors wrapping ErrProvision that name the stream.
func Provision(ctx context.Context, js jetstream.JetStream, spec events.Spec) error {
	spec = spec.WithDefaults()
	for _, cfg := range spec.Streams() {
		if err := retry(ctx, func() error {
			_, err := js.CreateOrUpdateStream(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("%w: stream %s: %w", ErrProvision, cfg.Name, err)
		}
	}
	for _, cfg := range spec.KeyValues() {
		if err := retry(ctx, func() error {
			_, err := js.CreateOrUpdateKeyValue(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("%w: kv %s: %w", ErrProvision, cfg.Bucket, err)
		}
	}
	for _, cfg := range spec.ObjectStores() {
		if err := retry(ctx, func() error {
			_, err := js.CreateOrUpdateObjectStore(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("%w: object store %s: %w", ErrProvision, cfg.Bucket, err)
		}
	}
	return nil
}

// WaitProvisioned waits until every stream, KV bucket and object store of spec exists, changing
// nothing (it needs only $JS.API.STREAM.INFO): how a role user without the right to manage
// streams starts before or after the admin's Provision. ctx bounds the wait.
func WaitProvisioned(ctx context.Context, js jetstream.JetStream, spec events.Spec) error {
	spec = spec.WithDefaults()
	var names []string
	for _, c := range spec.Streams() {
		names = append(names, c.Name)
	}
	for _, c := range spec.KeyValues() {
		names = append(names, "KV_"+c.Bucket)
	}
	for _, c := range spec.ObjectStores() {
		names = append(names, "OBJ_"+c.Bucket)
	}
	for _, name := range names {
		wait := 50 * time.Millisecond
		for {
			_, err := js.Stream(ctx, name)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrStreamNotFound) && !retriable(err) {
				return fmt.Errorf("%w: stream %s: %w", ErrProvision, name, err)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%w: stream %s does not exist yet (provision as an admin user): %w", ErrProvision, name, ctx.Err())
			case <-t.C:
			}
			if wait *= 2; wait > 2*time.Second {
				wait = 2 * time.Second
			}
		}
	}
	return nil
}

// retry runs op until it succeeds, fails with a permanent error, or ctx ends.
func retry(ctx context.Context, op func() error) error {
	wait := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || !retriable(err) {
			return err
		}
		if attempt >= 20 {
			return fmt.Errorf("after %d attempts: %w", attempt, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		if wait *= 2; wait > time.Second {
			wait = time.Second
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
		// 503: JetStream temporarily unavailable (cluster forming, leader election).
		return apiErr.Code == 503
	}
	return false
}
