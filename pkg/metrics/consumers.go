package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// ConsumerLister is the part of jetstream.JetStream the consumer gauge needs.
type ConsumerLister interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// Consumers is agentbus_consumer_pending_messages{stream,consumer} (and its ack-pending twin),
// for the durable consumers of the streams a process's roles consume: a periodic reader of
// consumer info, so a scrape never waits on the bus and the bus sees one list request per
// stream per interval, whatever the scrape rate.
type Consumers struct {
	pending    *prometheus.GaugeVec
	ackPending *prometheus.GaugeVec
	streams    chan string
}

// NewConsumers registers the consumer gauges on r (once per process; nil r gives nil).
func NewConsumers(r *Registry) *Consumers {
	return set(r, "consumers", func() (*Consumers, []prometheus.Collector) {
		m := &Consumers{
			pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "consumer_pending_messages",
				Help: "Messages of the stream not yet delivered to the durable consumer (its backlog), read every 15 s."}, []string{"stream", "consumer"}),
			ackPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "consumer_ack_pending_messages",
				Help: "Messages delivered to the durable consumer and not yet acknowledged (in flight), read every 15 s."}, []string{"stream", "consumer"}),
		}
		return m, []prometheus.Collector{m.pending, m.ackPending}
	})
}

// ConsumerInterval is how often Watch reads consumer info.
const ConsumerInterval = 15 * time.Second

// Watch reads the durable consumers of streams every interval (ConsumerInterval when 0) until
// ctx ends; it returns then. Consumers that disappear lose their series; ephemeral and ordered
// consumers (random names) are never reported. A stream the process may not read (a
// least-privileged role user) is logged once at debug and skipped from then on.
func (m *Consumers) Watch(ctx context.Context, js ConsumerLister, streams []string, interval time.Duration, log *slog.Logger) {
	if m == nil || len(streams) == 0 {
		return
	}
	if interval <= 0 {
		interval = ConsumerInterval
	}
	if log == nil {
		log = slog.Default()
	}
	skip := map[string]bool{}
	seen := map[[2]string]bool{}
	read := func() {
		now := map[[2]string]bool{}
		for _, name := range streams {
			if skip[name] {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := m.readStream(rctx, js, name, now)
			cancel()
			if err != nil && ctx.Err() == nil {
				log.Debug("consumer metrics: stream not readable; not reporting it", "stream", name, "err", err)
				skip[name] = true
			}
		}
		for k := range seen {
			if !now[k] {
				m.pending.DeleteLabelValues(k[0], k[1])
				m.ackPending.DeleteLabelValues(k[0], k[1])
			}
		}
		seen = now
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		read()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Consumers) readStream(ctx context.Context, js ConsumerLister, name string, now map[[2]string]bool) error {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	l := st.ListConsumers(ctx)
	for ci := range l.Info() {
		if ci == nil || ci.Config.Durable == "" {
			continue
		}
		m.pending.WithLabelValues(name, ci.Name).Set(float64(ci.NumPending))
		m.ackPending.WithLabelValues(name, ci.Name).Set(float64(ci.NumAckPending))
		now[[2]string{name, ci.Name}] = true
	}
	return l.Err()
}
