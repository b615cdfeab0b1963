// Package approvals persists the owner's bash approvals (execpolicy.Approvals) in KV
// "approvals", one key per endpoint (platform + bot), so every tool worker judges commands
// with the same approvals and an /approve in private chat takes effect everywhere at once.
package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Store reads and updates approvals.
type Store struct{ kv jetstream.KeyValue }

// Open opens the bucket.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := natsutil.KeyValue(ctx, js, events.BucketApprovals)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", events.BucketApprovals, err)
	}
	return &Store{kv: kv}, nil
}

// Key is the KV key of an endpoint.
func Key(platform, bot string) string { return events.EncodeToken(platform + ":" + bot) }

// Get returns the endpoint's approvals (empty when none were given) and the KV revision.
func (s *Store) Get(ctx context.Context, platform, bot string) (*execpolicy.Approvals, uint64, error) {
	e, err := s.kv.Get(ctx, Key(platform, bot))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &execpolicy.Approvals{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("load approvals %s/%s: %w", platform, bot, err)
	}
	var a execpolicy.Approvals
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return nil, 0, fmt.Errorf("decode approvals %s/%s: %w", platform, bot, err)
	}
	return &a, e.Revision(), nil
}

// Update applies fn under a revision CAS, retrying on conflicts (retryConflicts). fn reports
// whether it changed anything; unchanged values are not written.
func (s *Store) Update(ctx context.Context, platform, bot string, fn func(*execpolicy.Approvals) (bool, error)) error {
	return retryConflicts(ctx, "store approvals "+platform+"/"+bot, func() error {
		a, rev, err := s.Get(ctx, platform, bot)
		if err != nil {
			return err
		}
		changed, err := fn(a)
		if err != nil || !changed {
			return err
		}
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		return s.put(ctx, Key(platform, bot), b, rev)
	})
}

// put writes b at key: a create when rev is 0, else an update at revision rev.
func (s *Store) put(ctx context.Context, key string, b []byte, rev uint64) error {
	var err error
	if rev == 0 {
		_, err = s.kv.Create(ctx, key, b)
	} else {
		_, err = s.kv.Update(ctx, key, b, rev)
	}
	return err
}

// retryConflicts runs attempt under jsconflict.Retry; its errors name what was written.
func retryConflicts(ctx context.Context, what string, attempt func() error) error {
	if err := jsconflict.Retry(ctx, attempt); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
