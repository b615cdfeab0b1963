package natsutil

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
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
	var jobs []func() error
	for _, cfg := range spec.Streams() {
		cfg.Placement = spec.Placement
		jobs = append(jobs, func() error {
			if err := retry(ctx, func(ctx context.Context) error {
				if upToDate(ctx, js, cfg.Name, func(have jetstream.StreamConfig) bool { return sameStream(have, cfg) }) {
					return nil
				}
				if st, err := js.Stream(ctx, cfg.Name); err == nil {
					if err := cannotUndeny(st.CachedInfo().Config, cfg); err != nil {
						return permanent{err}
					}
				}
				_, err := js.CreateOrUpdateStream(ctx, cfg)
				return err
			}); err != nil {
				return fmt.Errorf("%w: stream %s: %w", ErrProvision, cfg.Name, err)
			}
			return nil
		})
	}
	for _, cfg := range spec.KeyValues() {
		cfg.Placement = spec.Placement
		jobs = append(jobs, func() error {
			if err := retry(ctx, func(ctx context.Context) error {
				if upToDate(ctx, js, "KV_"+cfg.Bucket, func(have jetstream.StreamConfig) bool { return sameKV(have, cfg) }) {
					return nil
				}
				return provisionKV(ctx, js, cfg)
			}); err != nil {
				return fmt.Errorf("%w: kv %s: %w", ErrProvision, cfg.Bucket, err)
			}
			return nil
		})
	}
	for _, cfg := range spec.ObjectStores() {
		cfg.Placement = spec.Placement
		jobs = append(jobs, func() error {
			if err := retry(ctx, func(ctx context.Context) error {
				if upToDate(ctx, js, "OBJ_"+cfg.Bucket, func(have jetstream.StreamConfig) bool { return sameObjectStore(have, cfg) }) {
					return nil
				}
				_, err := js.CreateOrUpdateObjectStore(ctx, cfg)
				return err
			}); err != nil {
				return fmt.Errorf("%w: object store %s: %w", ErrProvision, cfg.Bucket, err)
			}
			return nil
		})
	}
	// A few at a time: each create is a round trip through the meta leader and the new
	// stream's own election; overlapping them shortens a cold start several times over.
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, provisionParallel)
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = job()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// provisionParallel bounds the streams and buckets provisioned at the same time.
const provisionParallel = 4

// upToDate reports whether stream exists with a config same accepts. Every process of a
// deployment provisions the same spec at start: reading the stream's info (answered by the
// stream's leader) spares the cluster's meta leader one proposal per stream and bucket per
// process, which is what a fresh cluster with many processes starting at once chokes on. Any
// error (not found, no answer) means "not known to be up to date": create-or-update decides.
func upToDate(ctx context.Context, js jetstream.JetStream, stream string, same func(jetstream.StreamConfig) bool) bool {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return false
	}
	info := s.CachedInfo()
	return info != nil && same(info.Config)
}

func orOne(n int) int {
	if n <= 0 {
		return 1
	}
	return n
}

// sameStream compares the fields events.Spec sets.
func sameStream(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Description == want.Description &&
		have.Retention == want.Retention && have.MaxAge == want.MaxAge && have.Storage == want.Storage &&
		have.Replicas == orOne(want.Replicas) && have.Duplicates == want.Duplicates &&
		have.AllowDirect == want.AllowDirect && have.AllowMsgTTL == want.AllowMsgTTL &&
		have.AllowMsgSchedules == want.AllowMsgSchedules && have.AllowRollup == want.AllowRollup &&
		have.AllowAtomicPublish == want.AllowAtomicPublish && have.MaxMsgsPerSubject == want.MaxMsgsPerSubject &&
		have.Discard == want.Discard && have.MaxMsgs == want.MaxMsgs && have.MaxBytes == want.MaxBytes &&
		have.MaxMsgSize == want.MaxMsgSize && have.MaxConsumers == want.MaxConsumers &&
		have.DenyDelete == want.DenyDelete && have.DenyPurge == want.DenyPurge
}

// sameKV compares the KV bucket's stream with the fields of cfg events.Spec sets and the
// roll-up, purge and delete flags it implies (kvStreamConfig).
func sameKV(have jetstream.StreamConfig, cfg jetstream.KeyValueConfig) bool {
	rollup := events.KVRollup(cfg)
	return have.Description == cfg.Description && have.MaxMsgsPerSubject == int64(orOne(int(cfg.History))) &&
		have.MaxAge == cfg.TTL && have.Storage == cfg.Storage && have.Replicas == orOne(cfg.Replicas) &&
		(have.AllowMsgTTL || cfg.LimitMarkerTTL == 0) && have.SubjectDeleteMarkerTTL == cfg.LimitMarkerTTL &&
		have.AllowRollup == rollup && have.DenyPurge == !rollup && have.DenyDelete
}

// provisionKV creates KV bucket cfg when it does not exist, then sets its stream to what cfg
// asks plus the flags events.KVRollup implies. nats.go's CreateOrUpdateKeyValue cannot be
// used for the update: it always asks for roll-ups on and purges allowed, and the server
// refuses to allow purges again once denied.
func provisionKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	name := "KV_" + cfg.Bucket
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
			return err // ErrBucketExists: lost a race; the retry updates
		}
		st, err = js.Stream(ctx, name)
	}
	if err != nil {
		return err
	}
	have := st.CachedInfo().Config
	want := kvStreamConfig(have, cfg)
	if have.DenyPurge && !want.DenyPurge {
		return permanent{fmt.Errorf("stream %s denies purges, which this bucket needs (roll-ups for its purges and delete markers), and the server cannot undo that: copy the bucket and recreate it", name)}
	}
	_, err = js.UpdateStream(ctx, want)
	return err
}

// kvStreamConfig is have (the stream of KV bucket cfg) with the fields events.Spec sets from
// cfg and the flags events.KVRollup implies. Message TTLs, once allowed, stay allowed (the
// server cannot turn them off).
func kvStreamConfig(have jetstream.StreamConfig, cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	c := have
	c.Description = cfg.Description
	c.MaxMsgsPerSubject = int64(orOne(int(cfg.History)))
	c.MaxAge = cfg.TTL
	c.Replicas = orOne(cfg.Replicas)
	c.SubjectDeleteMarkerTTL = cfg.LimitMarkerTTL
	c.AllowMsgTTL = have.AllowMsgTTL || cfg.LimitMarkerTTL > 0
	rollup := events.KVRollup(cfg)
	c.AllowRollup, c.DenyPurge, c.DenyDelete = rollup, !rollup, true
	if cfg.TTL > 0 && cfg.TTL < c.Duplicates {
		c.Duplicates = cfg.TTL
	}
	return c
}

// cannotUndeny reports the flag an update of stream have to want would have to turn off: the
// server refuses to allow deletes or purges again once denied, so such a stream (denied by an
// operator, or by a newer agentbus) has to be recreated for this version.
func cannotUndeny(have, want jetstream.StreamConfig) error {
	switch {
	case have.DenyPurge && !want.DenyPurge:
		return fmt.Errorf("stream %s denies purges, which agentbus needs there, and the server cannot undo that: recreate the stream", want.Name)
	case have.DenyDelete && !want.DenyDelete:
		return fmt.Errorf("stream %s denies message deletes, which agentbus needs there, and the server cannot undo that: recreate the stream", want.Name)
	}
	return nil
}

// sameObjectStore compares the object store's stream with the fields of cfg events.Spec sets.
func sameObjectStore(have jetstream.StreamConfig, cfg jetstream.ObjectStoreConfig) bool {
	return have.Description == cfg.Description && have.MaxAge == cfg.TTL && have.Storage == cfg.Storage &&
		have.Replicas == orOne(cfg.Replicas)
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

// RequestTimeout bounds one provisioning request (one create-or-update); a request that gets
// no answer in that time is retried.
const RequestTimeout = 5 * time.Second

// maxAttempts bounds the attempts per stream or bucket when ctx has no deadline.
const maxAttempts = 60

// Retry runs op, each attempt bounded by RequestTimeout, until it succeeds, fails with an error
// another attempt would not change, or ctx ends; attempts back off with jitter up to 2 s. It is
// for the JetStream API requests a role makes when it starts (creating its consumers): on a
// cluster that is forming or electing leaders one unanswered request must not fail the start.
func Retry(ctx context.Context, op func(context.Context) error) error { return retry(ctx, op) }

// Stream looks up stream name as Retry runs an op: with many roles starting at once a busy
// server can leave a request unanswered, and one such request must not spend a role's whole
// start budget. A stream that does not exist fails at once (jetstream.ErrStreamNotFound): roles
// look streams up after Provision or WaitProvisioned, so a missing one is a deployment error
// to report, not a state to wait out.
func Stream(ctx context.Context, js jetstream.StreamManager, name string) (st jetstream.Stream, err error) {
	err = retryUnless(ctx, jetstream.ErrStreamNotFound, func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, name)
		return err
	})
	return st, err
}

// KeyValue looks up KV bucket name as Stream does a stream; a bucket that does not exist fails
// at once (jetstream.ErrBucketNotFound).
func KeyValue(ctx context.Context, js jetstream.KeyValueManager, name string) (kv jetstream.KeyValue, err error) {
	err = Retry(ctx, func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, name)
		return err
	})
	return kv, err
}

// Consumer creates or updates the consumer cfg on stream as Retry runs an op: roles create
// their consumers when they start, often while the cluster elects leaders. A stream that does
// not exist fails at once (jetstream.ErrStreamNotFound), as in Stream.
//
// A durable that exists keeps where it starts: cfg's deliver policy and start sequence or time
// apply only when it is created. The server cannot change them, and a durable created to
// start after what was already done (Promote, from a region checkpoint) must not be refused by
// a role that asks for "everything" on its start.
func Consumer(ctx context.Context, js jetstream.StreamConsumerManager, stream string, cfg jetstream.ConsumerConfig) (c jetstream.Consumer, err error) {
	err = retryUnless(ctx, jetstream.ErrStreamNotFound, func(ctx context.Context) (err error) {
		c, err = js.CreateOrUpdateConsumer(ctx, stream, cfg)
		if err != nil && cfg.Durable != "" && startNotUpdatable(err) {
			have, ierr := js.Consumer(ctx, stream, cfg.Durable)
			if ierr != nil {
				return errors.Join(err, ierr)
			}
			hc := have.CachedInfo().Config
			cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = hc.DeliverPolicy, hc.OptStartSeq, hc.OptStartTime
			c, err = js.CreateOrUpdateConsumer(ctx, stream, cfg)
		}
		return err
	})
	return c, err
}

// startNotUpdatable reports the server's refusal to change a consumer's deliver policy, start
// sequence or start time.
func startNotUpdatable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "deliver policy can not be updated") || strings.Contains(s, "start sequence can not be updated") ||
		strings.Contains(s, "start time can not be updated")
}

// retryUnless runs op as Retry does, except that an error that is final ends it at once even
// where retriable would try again (a not-found during Provision may be a lost race).
func retryUnless(ctx context.Context, final error, op func(context.Context) error) error {
	err := Retry(ctx, func(ctx context.Context) error {
		err := op(ctx)
		if errors.Is(err, final) {
			return permanent{err}
		}
		return err
	})
	var p permanent
	if errors.As(err, &p) {
		return p.err
	}
	return err
}

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

// permanent marks an error that retriable would take as transient but the op knows is final.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// retriable reports errors that another attempt may not repeat: a lost create race (the
// other process created it between our update and create, so the next update finds it) and
// transient API trouble.
func retriable(err error) bool {
	var p permanent
	switch {
	case errors.As(err, &p):
		return false
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
