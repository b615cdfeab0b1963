// Package presence tells who is running: every role process of a deployment announces itself on
// the bus, and anyone with read access to the bus (agentbus status, the console) lists them.
//
// Each process puts one entry into KV presence (events.BucketPresence), key
// "<role>.<id>" (both tokens events.EncodeToken'd): a Record with the role, the replica id the
// role uses in leases and logs (turn worker id, tool worker id, ...), the host, pid, build
// (pkg/buildinfo) and start time, and for ingest and egress the connection state of each IM
// adapter. Announce refreshes the entry every third of the bucket's TTL
// (events.DefaultPresenceTTL) and deletes it when stopped, so a process that died without
// stopping vanishes within one TTL.
//
// The cost is one small KV put per process every few seconds, on a goroutine of its own: the
// turn path never touches presence. Readers see what the bus holds, never a process's memory: a
// record is at most one refresh interval old (Record.Updated says how old).
//
// Sessions owned by a turn worker are not in the record: the worker's liveness lease in KV
// leases says how many it runs (store.WorkerLeaseEvent.Sessions), and List joins it in.
package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/buildinfo"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
)

// Adapter connection states (Adapter.State).
const (
	// StateConnected: the adapter holds its platform connection and the platform answered.
	StateConnected = "connected"
	// StateConnecting: this replica holds the connection lease and is (re)connecting; Error
	// says why the last attempt failed, if one did.
	StateConnecting = "connecting"
	// StateDisconnected: the last attempt failed and the replica waits before trying again;
	// Error says why.
	StateDisconnected = "disconnected"
	// StateStandby: another replica holds the connection (single-connection platforms); this
	// one takes over when that one dies.
	StateStandby = "standby"
	// StateWebhook: the platform calls us (webhook / events API); there is no connection to hold.
	StateWebhook = "webhook"
)

// Adapter is the connection state of one IM bot's adapter in one process.
type Adapter struct {
	Platform string `json:"platform"`
	Bot      string `json:"bot"`
	// Part is "inbound" (ingest: receiving) or "preview" (egress: streaming previews).
	Part  string `json:"part,omitempty"`
	State string `json:"state"`
	// Error is the last failure's text when State is connecting or disconnected.
	Error string `json:"error,omitempty"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
}

// Healthy reports whether the adapter does its job (or another replica does it for this one):
// connected, webhook, or standby.
func (a Adapter) Healthy() bool {
	return a.State == StateConnected || a.State == StateWebhook || a.State == StateStandby
}

// Record is one running role process as it announced itself.
type Record struct {
	// Role is the role this entry is for (events.Role*: ingest, turn-worker, tool-worker, egress).
	// A process that runs several roles (agentbus up) has one entry per role.
	Role string `json:"role"`
	// ID is the replica id the role uses on the bus (the turn worker's lease owner, the tool
	// worker's id, ...), so an id seen in a lease, a log or a turn maps to a host and pid.
	ID       string    `json:"id"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Version  string    `json:"version"`            // buildinfo.Get().Version
	Revision string    `json:"revision,omitempty"` // buildinfo.Get().Revision
	Started  time.Time `json:"started"`
	// Updated is when the entry was last written (the writer's clock).
	Updated time.Time `json:"updated"`
	// Adapters are the IM adapters this process runs for this role, with their state.
	Adapters []Adapter `json:"adapters,omitempty"`
	// Sessions is, for a turn worker, how many sessions it owns as of its last lease renewal;
	// -1 when unknown. Filled by List from KV leases, never written.
	Sessions int `json:"sessions,omitempty"`
}

// Uptime is how long the process had run at its last refresh.
func (r Record) Uptime() time.Duration { return r.Updated.Sub(r.Started) }

// Key is the KV presence key of a role replica.
func Key(role, id string) string { return events.EncodeToken(role) + "." + events.EncodeToken(id) }

// NewRecord fills the fields every process knows about itself: host, pid, build and now as
// start time.
func NewRecord(role, id string) Record {
	host, _ := os.Hostname()
	b := buildinfo.Get()
	return Record{Role: role, ID: id, Host: host, PID: os.Getpid(), Version: b.Version, Revision: b.Revision, Started: time.Now().UTC()}
}

// Options configure Announce.
type Options struct {
	// Interval between refreshes (default: a third of the bucket's TTL, or 10 s).
	Interval time.Duration
	// Adapters, when set, is called before each write for the adapters' current state. It must
	// be cheap and safe for concurrent use.
	Adapters func() []Adapter
	// Log (default slog.Default()); a failed refresh is logged at warn once per failure streak.
	Log *slog.Logger
}

// Handle is a running announcement.
type Handle struct {
	kv     jetstream.KeyValue
	key    string
	rec    Record
	o      Options
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{}
	once   sync.Once
	err    error
}

// ErrNoBucket means KV presence does not exist: the streams were provisioned by an older
// version. Run `agentbus provision` (or restart agentbus up, which provisions).
var ErrNoBucket = errors.New("presence: KV presence not provisioned (run agentbus provision)")

func open(ctx context.Context, js jetstream.KeyValueManager) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, events.BucketPresence)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoBucket
	}
	if err != nil {
		return nil, fmt.Errorf("presence: open bucket: %w", err)
	}
	return kv, nil
}

// Announce writes rec (Updated set to now) into KV presence and keeps it fresh until Stop. ctx
// bounds only the first write, whose failure is returned (nothing keeps running then). The
// refresh runs on its own goroutine; a failed refresh is retried at the next interval.
func Announce(ctx context.Context, js jetstream.KeyValueManager, rec Record, o Options) (*Handle, error) {
	if rec.Role == "" || rec.ID == "" {
		return nil, errors.New("presence: Announce needs Role and ID")
	}
	kv, err := open(ctx, js)
	if err != nil {
		return nil, err
	}
	if o.Interval <= 0 {
		o.Interval = events.DefaultPresenceTTL / 3
		if st, err := kv.Status(ctx); err == nil && st.TTL() > 0 {
			o.Interval = st.TTL() / 3
		}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if rec.Started.IsZero() {
		rec.Started = time.Now().UTC()
	}
	h := &Handle{kv: kv, key: Key(rec.Role, rec.ID), rec: rec, o: o, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	if err := h.put(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.run(rctx)
	return h, nil
}

func (h *Handle) put(ctx context.Context) error {
	r := h.rec
	r.Updated = time.Now().UTC()
	if h.o.Adapters != nil {
		r.Adapters = h.o.Adapters()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := h.kv.Put(ctx, h.key, b); err != nil {
		return fmt.Errorf("presence: put %s: %w", h.key, err)
	}
	return nil
}

func (h *Handle) run(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(h.o.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		}
		err := h.put(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			h.o.Log.Warn("presence: refresh failed; status will not list this process until it succeeds", "key", h.key, "err", err)
			failing = true
		case err == nil:
			failing = false
		}
	}
}

// Refresh asks for a write now instead of at the next interval (an adapter changed state).
// It never blocks.
func (h *Handle) Refresh() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Stop ends the refresh and deletes the entry, within ctx. Safe to call more than once.
func (h *Handle) Stop(ctx context.Context) error {
	h.once.Do(func() {
		h.cancel()
		select {
		case <-h.done:
		case <-ctx.Done():
		}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := h.kv.Delete(dctx, h.key); err != nil {
			h.err = fmt.Errorf("presence: delete %s: %w", h.key, err)
		}
	})
	return h.err
}

// Done is closed once the refresh goroutine has ended (after Stop).
func (h *Handle) Done() <-chan struct{} { return h.done }

// List returns every live record in KV presence, sorted by role then host then id, with the
// turn workers' Sessions joined in from their liveness leases (KV leases; -1 when the lease
// does not say). A record older than the bucket's TTL cannot be listed: the server removed it.
func List(ctx context.Context, js jetstream.KeyValueManager) ([]Record, error) {
	kv, err := open(ctx, js)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("presence: list: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []Record
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // gone between the listing and the get
		}
		if err != nil {
			return nil, fmt.Errorf("presence: get %s: %w", k, err)
		}
		var r Record
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			continue // not ours to judge; a newer writer's shape we cannot read
		}
		out = append(out, r)
	}
	sessions, err := workerSessions(ctx, js)
	if err == nil {
		for i := range out {
			if out[i].Role == events.RoleTurnWorker {
				if n, ok := sessions[out[i].ID]; ok {
					out[i].Sessions = n
				} else {
					out[i].Sessions = -1
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Role != b.Role {
			return a.Role < b.Role
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return a.ID < b.ID
	})
	return out, nil
}

// workerSessions reads every turn worker's liveness lease for how many sessions it runs.
func workerSessions(ctx context.Context, js jetstream.KeyValueManager) (map[string]int, error) {
	kv, err := js.KeyValue(ctx, events.BucketLeases)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeysFiltered(ctx, store.WorkerLeasePrefix+">")
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for k := range lister.Keys() {
		worker, err := events.DecodeToken(strings.TrimPrefix(k, store.WorkerLeasePrefix))
		if err != nil {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var rec struct {
			Sessions *int `json:"sessions"`
		}
		n := -1
		if json.Unmarshal(e.Value(), &rec) == nil && rec.Sessions != nil {
			n = *rec.Sessions
		}
		out[worker] = n
	}
	return out, nil
}
