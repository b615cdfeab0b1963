package natsutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// Regions (docs/regions.md): every region is its own JetStream domain (its own cluster and
// meta layer, so losing one region never costs another its quorum). One region is live; the
// others are standbys whose streams, buckets and object stores are mirrors of the live
// region's, read across domains through the $JS.<domain>.API prefix (regions joined by leaf
// nodes). A standby's roles change no stream and wait; `agentbus region promote` removes the
// mirror configuration (the server's mirror promotion: the stream keeps every message it
// copied, under the same sequence numbers) and the roles go live.

// BucketRegion is the live region's KV bucket of consumer checkpoints: key c.<stream>.<durable>,
// value a RegionCheckpoint. It is mirrored with every other bucket, so that a promoted standby
// creates each role's durable consumer to start after the last acknowledged message instead of
// at the start of the stream.
const BucketRegion = "region"

// regionCheckpointTTL drops the checkpoint of a consumer that no longer exists (an archiver
// gone for good): a checkpoint is written at least every regionRefresh while its consumer lives.
const (
	regionCheckpointTTL = 10 * time.Minute
	regionRefresh       = time.Minute
)

// Metadata keys of a standby mirror: what its live stream had that a mirror may not have
// (subjects, atomic batches, schedules, delete markers), restored by Promote.
const (
	metaLiveSubjects  = "agentbus.live.subjects"
	metaLiveAtomic    = "agentbus.live.atomic"
	metaLiveSchedules = "agentbus.live.schedules"
	metaLiveMarkerTTL = "agentbus.live.marker_ttl"
	metaSource        = "agentbus.standby.source"
	metaPromoted      = "agentbus.promoted"
)

// ErrLiveStream is returned by ProvisionStandby for a stream that exists and is not a mirror:
// the region was promoted (or provisioned live); a standby never touches a live stream.
var ErrLiveStream = errors.New("stream is live, not a standby mirror")

// RegionKV is the config of BucketRegion.
func RegionKV(spec events.Spec) jetstream.KeyValueConfig {
	spec = spec.WithDefaults()
	return jetstream.KeyValueConfig{
		Bucket:      BucketRegion,
		Description: "agentbus: consumer checkpoints for region promotion",
		History:     1,
		TTL:         regionCheckpointTTL,
		Storage:     spec.Storage,
		Replicas:    spec.Replicas,
		Placement:   spec.Placement,
	}
}

// RegionStreams names every stream a region holds: the streams of spec, the streams of its KV
// buckets (KV_<bucket>, BucketRegion's included) and of its object stores (OBJ_<bucket>).
func RegionStreams(spec events.Spec) []string {
	spec = spec.WithDefaults()
	var names []string
	for _, c := range spec.Streams() {
		names = append(names, c.Name)
	}
	for _, c := range spec.KeyValues() {
		names = append(names, "KV_"+c.Bucket)
	}
	names = append(names, "KV_"+BucketRegion)
	for _, c := range spec.ObjectStores() {
		names = append(names, "OBJ_"+c.Bucket)
	}
	return names
}

// ProvisionRegion creates or updates BucketRegion in a live region (after Provision).
func ProvisionRegion(ctx context.Context, js jetstream.JetStream, spec events.Spec) error {
	cfg := RegionKV(spec)
	if err := retry(ctx, func(ctx context.Context) error {
		if upToDate(ctx, js, "KV_"+cfg.Bucket, func(have jetstream.StreamConfig) bool { return sameKV(have, cfg) }) {
			return nil
		}
		return provisionKV(ctx, js, cfg)
	}); err != nil {
		return fmt.Errorf("%w: kv %s: %w", ErrProvision, cfg.Bucket, err)
	}
	return nil
}

// ProvisionStandby makes this domain a standby of the live region in domain source: every
// stream of RegionStreams that does not exist is created as a mirror of the stream of the
// same name in source, with the live stream's limits, this spec's replicas, storage and
// placement. It never updates a stream: an existing mirror is left as it is, and an existing
// live stream fails with ErrLiveStream (promoted already; starting a standby against it would
// otherwise turn it back, or worse, update it). A live stream source has not provisioned yet
// is waited for, with the retries Provision makes, until ctx ends.
func ProvisionStandby(ctx context.Context, js jetstream.JetStream, spec events.Spec, source string) error {
	spec = spec.WithDefaults()
	src, err := jetstream.NewWithDomain(js.Conn(), source)
	if err != nil {
		return err
	}
	names := RegionStreams(spec)
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, provisionParallel)
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := retry(ctx, func(ctx context.Context) error {
				st, err := js.Stream(ctx, name)
				if err == nil {
					if st.CachedInfo().Config.Mirror == nil {
						return permanent{ErrLiveStream}
					}
					return nil
				}
				if !errors.Is(err, jetstream.ErrStreamNotFound) {
					return err
				}
				live, err := src.Stream(ctx, name) // not found: source not provisioned yet, retried
				if err != nil {
					return fmt.Errorf("live stream in domain %s: %w", source, err)
				}
				_, err = js.CreateStream(ctx, StandbyConfig(live.CachedInfo().Config, source, spec))
				return err
			})
			if err != nil {
				errs[i] = fmt.Errorf("%w: standby stream %s: %w", ErrProvision, name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StandbyConfig is the mirror, in this domain, of live stream config live of domain source:
// the live limits and flags a mirror may have, no subjects, and in its metadata what Promote
// restores (the subjects, atomic publish, schedules, the KV delete-marker TTL), which a mirror
// may not have. Replicas, storage and placement are this region's (spec).
func StandbyConfig(live jetstream.StreamConfig, source string, spec events.Spec) jetstream.StreamConfig {
	c := live
	c.Subjects, c.Sources, c.SubjectTransform, c.RePublish = nil, nil, nil, nil
	c.Mirror = &jetstream.StreamSource{Name: live.Name, Domain: source}
	c.AllowAtomicPublish, c.AllowMsgSchedules, c.AllowMsgCounter = false, false, false
	c.SubjectDeleteMarkerTTL = 0
	c.FirstSeq = 0
	c.Replicas = orOne(spec.Replicas)
	c.Storage = spec.Storage
	c.Placement = spec.Placement
	c.Metadata = userMetadata(live.Metadata)
	c.Metadata[metaLiveSubjects] = strings.Join(live.Subjects, " ")
	c.Metadata[metaSource] = source
	if live.AllowAtomicPublish {
		c.Metadata[metaLiveAtomic] = "true"
	}
	if live.AllowMsgSchedules {
		c.Metadata[metaLiveSchedules] = "true"
	}
	if live.SubjectDeleteMarkerTTL > 0 {
		c.Metadata[metaLiveMarkerTTL] = live.SubjectDeleteMarkerTTL.String()
	}
	return c
}

// userMetadata copies m without the keys the server sets itself (_nats.*).
func userMetadata(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !strings.HasPrefix(k, "_nats.") {
			out[k] = v
		}
	}
	return out
}

// liveConfig is the config that promotes mirror config c: no mirror, the subjects and flags
// recorded by StandbyConfig, and a note of when it was promoted.
func liveConfig(c jetstream.StreamConfig, now time.Time) (jetstream.StreamConfig, error) {
	subj := strings.Fields(c.Metadata[metaLiveSubjects])
	if len(subj) == 0 {
		return c, fmt.Errorf("mirror %s has no %s metadata: not a standby agentbus created", c.Name, metaLiveSubjects)
	}
	c.Mirror = nil
	c.Subjects = subj
	c.AllowAtomicPublish = c.Metadata[metaLiveAtomic] == "true"
	c.AllowMsgSchedules = c.Metadata[metaLiveSchedules] == "true"
	if s := c.Metadata[metaLiveMarkerTTL]; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return c, fmt.Errorf("mirror %s: %s %q: %w", c.Name, metaLiveMarkerTTL, s, err)
		}
		c.SubjectDeleteMarkerTTL = d
		c.AllowMsgTTL = true
	}
	md := userMetadata(c.Metadata)
	for _, k := range []string{metaLiveSubjects, metaLiveAtomic, metaLiveSchedules, metaLiveMarkerTTL} {
		delete(md, k)
	}
	md[metaPromoted] = now.UTC().Format(time.RFC3339Nano)
	c.Metadata = md
	return c, nil
}

// WaitPromoted waits until every stream of RegionStreams exists and is live (not a mirror):
// how a standby's roles wait for `agentbus region promote`. It polls every poll; ctx bounds it.
func WaitPromoted(ctx context.Context, js jetstream.JetStream, spec events.Spec, poll time.Duration) error {
	for _, name := range RegionStreams(spec) {
		for {
			st, err := js.Stream(ctx, name)
			if err == nil && st.CachedInfo().Config.Mirror == nil {
				break
			}
			if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !retriable(err) {
				return fmt.Errorf("standby: stream %s: %w", name, err)
			}
			t := time.NewTimer(poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("standby: stream %s not promoted: %w", name, ctx.Err())
			case <-t.C:
			}
		}
	}
	return nil
}

// PromotedStream is one stream as Promote found it.
type PromotedStream struct {
	Name      string
	WasMirror bool          // false: it was live already
	LastSeq   uint64        // the last sequence it holds (the live region's numbering)
	Lag       uint64        // messages the mirror knew it was behind when last in contact
	Active    time.Duration // time since the mirror last heard from its origin
	// Schedules is how many message schedules Promote re-armed in it (rearmSchedules).
	Schedules int
}

// PromotedConsumer is a durable consumer Promote created from a checkpoint.
type PromotedConsumer struct {
	Stream, Name string
	StartSeq     uint64 // 0: from the start of the stream (no acknowledged message checkpointed)
	Existed      bool   // it existed already; left as it was
	Err          error  // it could not be created (the role creates it, from the start)
}

// PromoteReport is what Promote did.
type PromoteReport struct {
	Streams   []PromotedStream
	Consumers []PromotedConsumer
}

// Promote turns this domain's standby mirrors into the live streams: for every stream of
// RegionStreams that is a mirror it removes the mirror configuration and restores the live
// subjects and flags (StandbyConfig's metadata), which the server applies keeping every
// message and sequence number. Then it provisions spec as a live region does (Provision and
// ProvisionRegion: limits back to the spec) and creates every durable consumer checkpointed in
// BucketRegion that does not exist, starting after its checkpointed ack floor, so that the
// roles, which create their consumers to deliver everything, find them already positioned
// after what was done (Consumer keeps an existing consumer's start). It is idempotent: a second
// run finds everything live and every consumer present.
//
// Nothing stops the old live region from coming back: fence it first (docs/regions.md).
func Promote(ctx context.Context, js jetstream.JetStream, spec events.Spec) (PromoteReport, error) {
	spec = spec.WithDefaults()
	var rep PromoteReport
	now := time.Now()
	names := RegionStreams(spec)
	// The first stream is the gate, promoted last: standby roles (WaitPromoted) start once every
	// stream is live, so only after the consumers below exist, never racing them.
	gate := names[0]
	promote := func(name string) error {
		var ps PromotedStream
		err := retry(ctx, func(ctx context.Context) error {
			st, err := js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return permanent{fmt.Errorf("no stream %s here: is this a standby region (nats.region.standby)?", name)}
			}
			if err != nil {
				return err
			}
			info := st.CachedInfo()
			ps = PromotedStream{Name: name, LastSeq: info.State.LastSeq}
			if info.Config.Mirror == nil {
				return nil
			}
			ps.WasMirror = true
			if m := info.Mirror; m != nil {
				ps.Lag, ps.Active = m.Lag, m.Active
			}
			want, err := liveConfig(info.Config, now)
			if err != nil {
				return permanent{err}
			}
			_, err = js.UpdateStream(ctx, want)
			return err
		})
		if err != nil {
			return fmt.Errorf("promote %s: %w", name, err)
		}
		if ps.WasMirror {
			if ps.Schedules, err = rearmSchedules(ctx, js, name); err != nil {
				return fmt.Errorf("promote %s: re-arm its schedules: %w", name, err)
			}
		}
		rep.Streams = append(rep.Streams, ps)
		return nil
	}
	for _, name := range names[1:] {
		if err := promote(name); err != nil {
			return rep, err
		}
	}
	cps, err := readCheckpoints(ctx, js)
	if err != nil {
		return rep, err
	}
	for _, cp := range cps {
		pc := PromotedConsumer{Stream: cp.Stream, Name: cp.Config.Durable}
		err := retry(ctx, func(ctx context.Context) error {
			if _, err := js.Consumer(ctx, cp.Stream, cp.Config.Durable); err == nil {
				pc.Existed = true
				return nil
			} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return err
			}
			cfg := cp.Config
			cfg.Metadata = userMetadata(cfg.Metadata)
			cfg.OptStartTime = nil
			if cp.AckFloor > 0 {
				cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, cp.AckFloor+1
				pc.StartSeq = cfg.OptStartSeq
			} else {
				cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverAllPolicy, 0
			}
			_, err := js.CreateConsumer(ctx, cp.Stream, cfg)
			if errors.Is(err, jetstream.ErrConsumerExists) {
				pc.Existed = true
				return nil
			}
			return err
		})
		if err != nil {
			// Not fatal: the role creates this consumer itself, from the start of the stream.
			pc.Err = err
		}
		rep.Consumers = append(rep.Consumers, pc)
	}
	if err := promote(gate); err != nil {
		return rep, err
	}
	if err := Provision(ctx, js, spec); err != nil {
		return rep, err
	}
	if err := ProvisionRegion(ctx, js, spec); err != nil {
		return rep, err
	}
	return rep, nil
}

// rearmSchedules publishes every message schedule that stream holds again, unchanged, over
// itself. A schedule copied by a mirror is stored but not armed: nats-server (2.15) arms a
// schedule when it stores it in a stream that allows schedules, and when it turns schedules on
// for a stream it looks only in the blocks it counted schedules in while storing, which a
// mirror never does; so a promoted SESSION_IN would hold every reminder of the lost region and
// fire none of them. Published again (a subject roll-up, expecting the copy as the subject's
// last message, so a schedule written meanwhile is left alone), each is armed; an "@at" whose
// time passed while the region was down fires at once. It reports how many it re-armed. A
// stream without schedules (AllowMsgSchedules off) has none to re-arm.
func rearmSchedules(ctx context.Context, js jetstream.JetStream, name string) (int, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	if !st.CachedInfo().Config.AllowMsgSchedules {
		return 0, nil
	}
	// Schedules live on their own subjects (events.PrefixSchedule); the stream's subject list
	// with their counts is one request per 100,000 subjects, paged by the client.
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(events.PrefixSchedule+".>"))
	if err != nil {
		return 0, err
	}
	n := 0
	for subj := range info.State.Subjects {
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("read %s: %w", subj, err)
		}
		if m.Header.Get(jetstream.ScheduleHeader) == "" {
			continue // a cancelled schedule's marker
		}
		again := nats.NewMsg(subj)
		again.Data = m.Data
		for k, v := range m.Header {
			// The schedule's own headers and agentbus's; none the server set or a publish
			// option would apply again (expectations, the message id the dedupe window knows).
			if strings.HasPrefix(k, "Nats-") && !isScheduleHeader(k) {
				continue
			}
			again.Header[k] = v
		}
		again.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		_, err = js.PublishMsg(ctx, again, jetstream.WithExpectLastSequencePerSubject(m.Sequence))
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
			continue // rewritten meanwhile: the new one is armed
		case err != nil:
			return n, fmt.Errorf("re-arm %s: %w", subj, err)
		}
		n++
	}
	return n, nil
}

// isScheduleHeader reports whether k is one of the headers a client gives a message schedule.
func isScheduleHeader(k string) bool {
	switch k {
	case jetstream.ScheduleHeader, jetstream.ScheduleTargetHeader, jetstream.ScheduleSourceHeader, jetstream.ScheduleTTLHeader,
		jetstream.ScheduleTimeZoneHeader, jetstream.ScheduleRollupHeader:
		return true
	}
	return false
}

// RegionCheckpoint is a durable consumer's position as the live region last saw it.
type RegionCheckpoint struct {
	Stream   string                   `json:"stream"`
	Config   jetstream.ConsumerConfig `json:"config"`
	AckFloor uint64                   `json:"ack_floor"` // stream sequence: everything up to it is acknowledged
	At       time.Time                `json:"at"`
}

func checkpointKey(stream, durable string) string { return "c." + stream + "." + durable }

func readCheckpoints(ctx context.Context, js jetstream.JetStream) ([]RegionCheckpoint, error) {
	kv, err := KeyValue(ctx, js, BucketRegion)
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", BucketRegion, err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []RegionCheckpoint
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kv %s key %s: %w", BucketRegion, k, err)
		}
		var cp RegionCheckpoint
		if err := json.Unmarshal(e.Value(), &cp); err != nil || cp.Stream == "" || cp.Config.Durable == "" {
			continue // not ours; a checkpoint that cannot be read is a consumer created from the start
		}
		out = append(out, cp)
	}
	return out, nil
}

// Checkpointer records, in a live region, the ack floor of every durable consumer of spec's
// streams in BucketRegion (RegionCheckpoint), when it moved and at least every regionRefresh.
type Checkpointer struct {
	js   jetstream.JetStream
	spec events.Spec
	kv   jetstream.KeyValue
	last map[string]checkpointed
}

type checkpointed struct {
	floor uint64
	at    time.Time
}

// NewCheckpointer opens BucketRegion (ProvisionRegion creates it).
func NewCheckpointer(ctx context.Context, js jetstream.JetStream, spec events.Spec) (*Checkpointer, error) {
	kv, err := KeyValue(ctx, js, BucketRegion)
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", BucketRegion, err)
	}
	return &Checkpointer{js: js, spec: spec.WithDefaults(), kv: kv, last: map[string]checkpointed{}}, nil
}

// Once records every durable consumer's ack floor that moved since the last call (or was last
// written regionRefresh ago). It returns how many it wrote.
func (c *Checkpointer) Once(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for _, sc := range c.spec.Streams() {
		st, err := c.js.Stream(ctx, sc.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.CachedInfo().Config.Retention == jetstream.WorkQueuePolicy {
			// A work queue's consumers must deliver all; what was done is gone from the live
			// stream, though not from its mirror (a mirror copies messages, not their removal):
			// the role's own at-most-once records (mirrored) answer those again.
			continue
		}
		infos := st.ListConsumers(ctx)
		for ci := range infos.Info() {
			// Only the roles' pull consumers: not the push consumers mirrors create on the
			// live stream (JS_MIRROR_*), nor ephemeral ones.
			if ci.Config.Durable == "" || ci.Config.DeliverSubject != "" || strings.HasPrefix(ci.Name, "JS_") {
				continue
			}
			key := checkpointKey(sc.Name, ci.Config.Durable)
			floor := ci.AckFloor.Stream
			if prev, ok := c.last[key]; ok && prev.floor == floor && time.Since(prev.at) < regionRefresh {
				continue
			}
			b, err := json.Marshal(RegionCheckpoint{Stream: sc.Name, Config: ci.Config, AckFloor: floor, At: time.Now().UTC()})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if _, err := c.kv.Put(ctx, key, b); err != nil {
				errs = append(errs, fmt.Errorf("checkpoint %s: %w", key, err))
				continue
			}
			c.last[key] = checkpointed{floor, time.Now()}
			n++
		}
		if err := infos.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// Run calls Once every interval until ctx ends, logging failures at warn.
func (c *Checkpointer) Run(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
		if _, err := c.Once(rctx); err != nil && ctx.Err() == nil {
			log.Warn("region checkpoint", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// MirrorDomain is the JetStream domain mirror m copies from: the server keeps a mirror's
// domain as its external API prefix $JS.<domain>.API. "" when m is local or not a mirror.
func MirrorDomain(m *jetstream.StreamSource) string {
	if m == nil {
		return ""
	}
	if m.Domain != "" {
		return m.Domain
	}
	if m.External != nil {
		p := strings.TrimSuffix(strings.TrimPrefix(m.External.APIPrefix, "$JS."), ".API")
		if p != m.External.APIPrefix {
			return p
		}
	}
	return ""
}
