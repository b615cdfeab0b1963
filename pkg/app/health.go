package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
)

// health is what /healthz reports: the bus connection, JetStream answering, and each role this
// process started, still running. A probe answers 200 with one line per check when all pass,
// 503 naming what failed otherwise (container HEALTHCHECKs and orchestrators restart on it).
type health struct {
	mu     sync.Mutex
	roles  []string
	checks map[string]func() error // role -> nil while it runs
	last   time.Time               // of the last JetStream probe
	lastJS error
}

func (h *health) add(role string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.roles = append(h.roles, role)
}

// check registers a liveness check for role (nil error = running).
func (h *health) check(role string, f func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.checks == nil {
		h.checks = map[string]func() error{}
	}
	h.checks[role] = f
}

// Healthz reports the process's health: nil when the bus is connected, JetStream answers and
// every role runs; otherwise an error naming each failed check. It may block up to 2 s for the
// JetStream probe, whose result is reused for a second.
func (p *Process) Healthz(ctx context.Context) (report string, err error) {
	var lines, bad []string
	status := nats.CLOSED
	if p.NC != nil {
		status = p.NC.Status()
	}
	if status == nats.CONNECTED {
		lines = append(lines, "nats: connected")
	} else {
		bad = append(bad, "nats: "+strings.ToLower(status.String()))
	}
	if status == nats.CONNECTED {
		if err := p.probeJetStream(ctx); err != nil {
			bad = append(bad, "jetstream: "+err.Error())
		} else {
			lines = append(lines, "jetstream: ok")
		}
	}
	p.health.mu.Lock()
	roles := append([]string(nil), p.health.roles...)
	checks := p.health.checks
	p.health.mu.Unlock()
	for _, r := range roles {
		if f := checks[r]; f != nil {
			if err := f(); err != nil {
				bad = append(bad, r+": "+err.Error())
				continue
			}
		}
		lines = append(lines, r+": running")
	}
	if len(roles) == 0 {
		bad = append(bad, "roles: none running")
	}
	if len(bad) > 0 {
		return strings.Join(append(bad, lines...), "\n"), errors.New(strings.Join(bad, "; "))
	}
	return strings.Join(lines, "\n"), nil
}

func (p *Process) probeJetStream(ctx context.Context) error {
	h := &p.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.last) < time.Second {
		return h.lastJS
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := p.JS.AccountInfo(ctx)
	h.last, h.lastJS = time.Now(), err
	return err
}

// serveHealthz answers GET /healthz from Healthz.
func (p *Process) serveHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	report, err := p.Healthz(r.Context())
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = io.WriteString(w, report+"\n")
}

// startHealth serves /healthz on health.listen, when set (every role binary can, so a
// container health check works for roles without an HTTP port of their own).
func (p *Process) startHealth(cfg *config.Config, log *slog.Logger) error {
	addr := cfg.Health.Listen
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("health.listen %s cannot be used (%v): choose a free address", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", p.serveHealthz)
	if sameAddr(cfg.Metrics.Listen, addr) {
		mux.Handle("GET /metrics", p.Metrics.Handler()) // one listener for both (observe.go)
	}
	p.serveHTTP("health server", mux, ln, 2*time.Second, log)
	p.HealthURL = "http://" + ln.Addr().String() + "/healthz"
	return nil
}

// doneCheck reports a role as stopped once done is closed.
func doneCheck(done <-chan struct{}) func() error {
	return func() error {
		select {
		case <-done:
			return errors.New("stopped")
		default:
			return nil
		}
	}
}
