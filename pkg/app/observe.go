package app

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/logging"
	"github.com/agentbus/agentbus/pkg/metrics"
)

// startMetrics serves GET /metrics on metrics.listen, when set. An address equal to
// health.listen or (with ingest's webhook listener running) im.webhook.listen is served by
// that listener instead (startHealth, startIngest mount the handler), since two servers
// cannot listen on one port.
func (p *Process) startMetrics(cfg *config.Config, log *slog.Logger) error {
	addr := cfg.Metrics.Listen
	switch {
	case addr == "":
		return nil
	case sameAddr(addr, cfg.Health.Listen) && p.HealthURL != "":
		p.MetricsURL = metricsURL(p.HealthURL)
		return nil
	case sameAddr(addr, cfg.IM.Webhook.Listen) && p.WebhookURL != "":
		p.MetricsURL = p.WebhookURL + "/metrics"
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics.listen %s cannot be used (%v): choose a free address (--metrics-listen overrides it)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", p.Metrics.Handler())
	p.serveHTTP("metrics server", mux, ln, 2*time.Second, log)
	p.MetricsURL = "http://" + ln.Addr().String() + "/metrics"
	return nil
}

// metricsURL turns http://host:port/healthz into http://host:port/metrics.
func metricsURL(healthURL string) string {
	const suffix = "/healthz"
	if len(healthURL) > len(suffix) && healthURL[len(healthURL)-len(suffix):] == suffix {
		return healthURL[:len(healthURL)-len(suffix)] + "/metrics"
	}
	return healthURL
}

// sameAddr reports whether two listen addresses are the same, both set. "127.0.0.1:0" picks a
// fresh port each time, so it is never the same as anything.
func sameAddr(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if a == b {
		_, port, err := net.SplitHostPort(a)
		return err != nil || port != "0"
	}
	return false
}

// watchConsumers keeps agentbus_consumer_pending_messages current for the streams a role
// consumes, on a goroutine the process owns.
func (p *Process) watchConsumers(log *slog.Logger, streams ...string) {
	m := metrics.NewConsumers(p.Metrics)
	p.spawn("consumer metrics", func(ctx context.Context) {
		m.Watch(ctx, p.JS, streams, 0, log)
	})
}

// modelLogContext puts the provider and model of each model call on its context, so a
// warning pkg/llm logs with it (a retry) names them next to the session and turn.
func modelLogContext(next metrics.StreamFunc) metrics.StreamFunc {
	return func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
		if model != nil {
			ctx = logging.With(ctx, "provider", model.Provider, "model", model.ID)
		}
		return next(ctx, model, c, opts)
	}
}

// deadLetterCounter counts in agentbus_dead_letters_total every dead letter published through
// it (dlq.<role>.<reason>). Ingest and its IM adapters publish theirs through many paths (the
// webhook, each adapter's inbound, pkg/im.DeadLetter); counting where they all meet the bus
// keeps a new path from being missed. Roles that count their own (turn worker, tool worker,
// egress) do not get it, so nothing is counted twice.
type deadLetterCounter struct {
	jetstream.JetStream
	dl *metrics.DeadLetters
}

func (c deadLetterCounter) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := c.JetStream.PublishMsg(ctx, msg, opts...)
	if err == nil && strings.HasPrefix(msg.Subject, events.PrefixDeadLetter+".") {
		if role, reason, perr := events.ParseDeadLetterSubject(msg.Subject); perr == nil {
			c.dl.Add(role, reason)
		}
	}
	return ack, err
}
