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
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/presence"
)

// health is what /healthz and /readyz report: the bus connection, JetStream answering, each
// role this process started still running, and (readiness) the streams and the IM adapters'
// connections. A probe answers 200 with one line per check when all pass, 503 naming what
// failed otherwise.
type health struct {
	mu       sync.Mutex
	roles    []string
	checks   map[string]func() error // role -> nil while it runs
	last     time.Time               // of the last JetStream probe
	lastJS   error
	lastSt   time.Time // of the last streams probe
	lastStE  error
	conns    *im.ConnStates    // the IM adapters' connections (inbound), created on first use
	ids      map[string]string // role -> replica id announced in KV presence
	presence map[string]func() // role -> ask its presence entry to refresh now
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

// setID records the replica id role uses on the bus (announced in KV presence).
func (h *health) setID(role, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids == nil {
		h.ids = map[string]string{}
	}
	h.ids[role] = id
}

func (h *health) id(role string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids[role]
}

// connStates is the tracker set of the process's adapter connections; a change refreshes the
// ingest role's presence entry at once.
func (h *health) connStates() *im.ConnStates {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns == nil {
		h.conns = im.NewConnStates(func() {
			h.mu.Lock()
			kick := h.presence[events.RoleIngest]
			h.mu.Unlock()
			if kick != nil {
				kick()
			}
		})
	}
	return h.conns
}

// adapters is the adapters' state as pkg/presence records it.
func (h *health) adapters() []presence.Adapter {
	h.mu.Lock()
	cs := h.conns
	h.mu.Unlock()
	if cs == nil {
		return nil
	}
	var out []presence.Adapter
	for _, s := range cs.Snapshot() {
		out = append(out, presence.Adapter{Platform: s.Platform, Bot: s.Bot, Part: s.Part, State: s.State, Error: s.Err, Since: s.Since})
	}
	return out
}

// Healthz reports the process's liveness: nil when the bus is connected, JetStream answers and
// every role runs; otherwise an error naming each failed check. The adapters' connections are
// listed but do not fail it (restarting the process does not bring a platform back; /readyz
// fails instead). It may block up to 2 s for the JetStream probe, whose result is reused for a
// second.
func (p *Process) Healthz(ctx context.Context) (report string, err error) {
	return p.probe(ctx, false, false)
}

// Readyz reports whether the process can do its work now: what Healthz checks, plus every
// stream of the wire contract reachable and every IM adapter connection connected (or held by
// another replica, or a webhook). With degradedOK a failed adapter is reported as "degraded"
// and does not fail the probe (an operator who accepts running without one platform).
func (p *Process) Readyz(ctx context.Context, degradedOK bool) (report string, err error) {
	return p.probe(ctx, true, degradedOK)
}

func (p *Process) probe(ctx context.Context, ready, degradedOK bool) (report string, err error) {
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
			if ready {
				if err := p.probeStreams(ctx); err != nil {
					bad = append(bad, "streams: "+err.Error())
				} else {
					lines = append(lines, "streams: ok")
				}
			}
		}
	}
	p.health.mu.Lock()
	roles := append([]string(nil), p.health.roles...)
	checks := p.health.checks
	conns := p.health.conns
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
	if conns != nil {
		for _, s := range conns.Snapshot() {
			line := "adapter " + s.Platform + "/" + s.Bot + ": " + s.State
			if s.Err != "" {
				line += ": " + s.Err
			}
			switch {
			case s.Ready() || !ready:
				lines = append(lines, line)
			case degradedOK:
				lines = append(lines, "degraded: "+line)
			default:
				bad = append(bad, line)
			}
		}
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

// probeStreams checks that every stream of the wire contract exists (one stream-names request,
// reused for a second).
func (p *Process) probeStreams(ctx context.Context) error {
	h := &p.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.lastSt) < time.Second {
		return h.lastStE
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	have := map[string]bool{}
	names := p.JS.StreamNames(ctx)
	for n := range names.Name() {
		have[n] = true
	}
	err := names.Err()
	if err == nil {
		var missing []string
		for _, c := range events.DefaultSpec().Streams() {
			if !have[c.Name] {
				missing = append(missing, c.Name)
			}
		}
		if len(missing) > 0 {
			err = fmt.Errorf("missing %s (run agentbus provision)", strings.Join(missing, ", "))
		}
	}
	h.lastSt, h.lastStE = time.Now(), err
	return err
}

// serveHealthz answers GET /healthz from Healthz.
func (p *Process) serveHealthz(w http.ResponseWriter, r *http.Request) {
	report, err := p.Healthz(r.Context())
	writeProbe(w, report, err)
}

// serveReadyz answers GET /readyz from Readyz; ?degraded=ok accepts failed adapters.
func (p *Process) serveReadyz(w http.ResponseWriter, r *http.Request) {
	report, err := p.Readyz(r.Context(), r.URL.Query().Get("degraded") == "ok")
	writeProbe(w, report, err)
}

func writeProbe(w http.ResponseWriter, report string, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = io.WriteString(w, report+"\n")
}

// startHealth serves /healthz and /readyz on health.listen, when set (every role binary can, so a
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
	mux.HandleFunc("GET /readyz", p.serveReadyz)
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
