package llmbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Server defaults.
const (
	// DefaultHeartbeat is how often a server sends a heartbeat while it has nothing else to
	// send (a model thinking before its first token).
	DefaultHeartbeat = 5 * time.Second
	// DefaultServiceName is the micro service name Serve registers.
	DefaultServiceName = "agentbus-llm"
	// DefaultQueueGroup is the queue group of the endpoint: servers of one subject share its
	// requests.
	DefaultQueueGroup = "llmbus"
)

type serveConfig struct {
	name, version, queue, description string
	heartbeat                         time.Duration
	model                             func(*llm.Model)
	options                           func(*llm.StreamOptions)
	log                               *slog.Logger
}

// ServeOption configures Serve.
type ServeOption func(*serveConfig) error

var serviceName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// WithService sets the micro service's name and version (default DefaultServiceName,
// "1.0.0"); the name is what `nats micro ls` lists and the version must be semver.
func WithService(name, version string) ServeOption {
	return func(c *serveConfig) error {
		if !serviceName.MatchString(name) {
			return fmt.Errorf("%w: service name %q (letters, digits, - and _)", ErrInvalidOption, name)
		}
		c.name, c.version = name, version
		return nil
	}
}

// WithQueueGroup sets the endpoint's queue group (default DefaultQueueGroup).
func WithQueueGroup(q string) ServeOption {
	return func(c *serveConfig) error {
		if q == "" {
			return fmt.Errorf("%w: empty queue group", ErrInvalidOption)
		}
		c.queue = q
		return nil
	}
}

// WithHeartbeat sets the heartbeat interval (default DefaultHeartbeat). Clients give up after
// their idle timeout (DefaultIdleTimeout) without a message, so keep it well below that.
func WithHeartbeat(d time.Duration) ServeOption {
	return func(c *serveConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: heartbeat %s", ErrInvalidOption, d)
		}
		c.heartbeat = d
		return nil
	}
}

// WithModel lets the server rewrite each requested model before the provider sees it: point
// it at the server's own endpoint (BaseURL), set its api-specific fields. The model arrives
// as the client knows it (api "bus", the client's provider alias).
func WithModel(f func(*llm.Model)) ServeOption {
	return func(c *serveConfig) error { c.model = f; return nil }
}

// WithStreamOptions lets the server adjust each call's options: give its own API key (the
// client sends one only when its configuration has one), add Secrets to redact.
func WithStreamOptions(f func(*llm.StreamOptions)) ServeOption {
	return func(c *serveConfig) error { c.options = f; return nil }
}

// WithLogger sets where failures to answer are logged (default slog.Default()).
func WithLogger(l *slog.Logger) ServeOption {
	return func(c *serveConfig) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		c.log = l
		return nil
	}
}

// Server is a provider served on the bus by Serve.
type Server struct {
	nc      *nats.Conn
	subject string
	p       llm.Provider
	cfg     serveConfig
	svc     micro.Service
	base    context.Context
	kill    context.CancelFunc

	mu       sync.Mutex
	stopping bool
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
	done     chan struct{}
}

// Serve puts p on the bus: a NATS micro service (name WithService, queue group
// WithQueueGroup) with one endpoint on subject, answering each request with a reply stream as
// the package doc describes. Any number of servers may serve one subject; each request goes
// to one of them.
//
// Serve returns once the NATS server knows the endpoint's subscription. Each request is streamed on a goroutine of
// its own, through llm.StreamProvider, so a provider that panics or ends without a terminal
// event still ends the stream properly. ctx bounds the server's life: when it ends, the
// server stops taking requests and cancels the streams in flight (Stop does the same more
// gently). The connection stays the caller's.
func Serve(ctx context.Context, nc *nats.Conn, subject string, p llm.Provider, opts ...ServeOption) (*Server, error) {
	if nc == nil || p == nil {
		return nil, fmt.Errorf("%w: nil connection or provider", ErrInvalidOption)
	}
	if err := CheckSubject(subject); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
	}
	cfg := serveConfig{name: DefaultServiceName, version: "1.0.0", queue: DefaultQueueGroup, heartbeat: DefaultHeartbeat,
		description: "agentbus llm provider (llmbus v1)", log: slog.Default()}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	s := &Server{nc: nc, subject: subject, p: p, cfg: cfg, done: make(chan struct{})}
	s.base, s.kill = context.WithCancel(context.WithoutCancel(ctx))
	svc, err := micro.AddService(nc, micro.Config{Name: cfg.name, Version: cfg.version, Description: cfg.description, QueueGroup: cfg.queue,
		Metadata: map[string]string{"llmbus.version": "1", "llmbus.subject": subject}})
	if err != nil {
		s.kill()
		return nil, fmt.Errorf("llmbus: add service: %w", err)
	}
	if err := svc.AddEndpoint("stream", micro.HandlerFunc(s.handle), micro.WithEndpointSubject(subject)); err != nil {
		_ = svc.Stop()
		s.kill()
		return nil, fmt.Errorf("llmbus: add endpoint %q: %w", subject, err)
	}
	s.svc = svc
	// Make sure the server knows the subscription before Serve returns, so a request sent
	// right after (from another connection) finds a responder.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		_ = svc.Stop()
		s.kill()
		return nil, fmt.Errorf("llmbus: flush the endpoint's subscription: %w", err)
	}
	go func() {
		select {
		case <-ctx.Done():
			s.kill()
			_ = s.Stop(context.Background())
		case <-s.done:
		}
	}()
	return s, nil
}

// Stop stops taking requests, waits for the streams in flight until ctx ends, then cancels
// those left and waits for them to send their last event. Safe to call more than once and
// from any goroutine; the first call's result is returned to all.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		err := s.svc.Stop()
		// Let the NATS server know the endpoint is gone before waiting, so new requests go to
		// the other servers of the subject (or get no responders) rather than to this one.
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = s.nc.FlushWithContext(fctx)
		cancel()
		waited := make(chan struct{})
		go func() { s.wg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-ctx.Done():
			s.kill()
			<-waited
			err = errors.Join(err, fmt.Errorf("llmbus: stop: %w", ctx.Err()))
		}
		s.kill()
		s.stopErr = err
		close(s.done)
	})
	return s.stopErr
}

// Done is closed once Stop has finished.
func (s *Server) Done() <-chan struct{} { return s.done }

// Info is the micro service's info (id, endpoints), for logs and tests.
func (s *Server) Info() micro.Info { return s.svc.Info() }

// Stats are the micro service's counters. A stream is counted when it is accepted (its
// processing time is not the stream's); refused requests count as errors.
func (s *Server) Stats() micro.Stats { return s.svc.Stats() }

func (s *Server) handle(req micro.Request) {
	reply := req.Reply()
	if reply == "" {
		return // nobody to answer
	}
	if v := req.Headers().Get(VersionHeader); v != "" && v != "1" {
		s.refuse(req, "400", fmt.Sprintf("llmbus: unsupported version %s (this server speaks %d)", v, Version))
		return
	}
	var r Request
	if err := json.Unmarshal(req.Data(), &r); err != nil {
		s.refuse(req, "400", fmt.Sprintf("llmbus: bad request: %v", err))
		return
	}
	if r.V != Version {
		s.refuse(req, "400", fmt.Sprintf("llmbus: unsupported version %d (this server speaks %d)", r.V, Version))
		return
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		s.refuse(req, "503", ErrStopped.Error()) // the client sends it again, to another server
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	hdr := req.Headers()
	go func() {
		defer s.wg.Done()
		s.stream(nats.Header(hdr), reply, &r)
	}()
}

// refuse answers a request that cannot be served with a one-event stream: an error event
// (seq 1), sent as a micro error so the service's stats count it. Code "503" (this server is
// stopping) tells the client to send the request again, as when nobody listens; "400" is
// final.
func (s *Server) refuse(req micro.Request, code, text string) {
	m := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{}, StopReason: llm.StopReasonError, ErrorMessage: text,
		Timestamp: time.Now().UnixMilli(), Usage: &llm.Usage{}}
	b, _ := json.Marshal(Event{V: Version, Seq: 1, Type: string(llm.EventError), Reason: llm.StopReasonError, Message: m})
	if err := req.Error(code, text, b); err != nil {
		s.cfg.log.Warn("llmbus: answer a refused request", "error", err)
	}
}

// stream serves one request. Every event goes to the client's inbox with the request's
// control subject as its reply subject: the client sends a cancel there, and when the inbox
// is gone (client cancelled or died) the NATS server answers an event with a no-responders
// status there. Either ends the call.
func (s *Server) stream(hdr nats.Header, reply string, r *Request) {
	// The caller's trace (TraceHeader) becomes the provider's parent span context.
	ctx, cancel := context.WithCancel(extractTrace(s.base, hdr))
	defer cancel()
	// The control subject lies below the request subject rather than in this connection's
	// inbox: a caller allowed to publish requests there may then cancel too, without
	// allow_responses (whose budget nats-server spends on every delivery of a reused reply
	// subject, so a cancel after an even number of events would be refused).
	ctrl := s.subject + ".ctl." + nuid.Next()
	csub, err := s.nc.Subscribe(ctrl, func(*nats.Msg) { cancel() })
	if err != nil {
		s.cfg.log.Warn("llmbus: subscribe to the control subject", "request", r.ID, "error", err)
		return
	}
	defer func() { _ = csub.Unsubscribe() }()

	var mu sync.Mutex
	seq := 0
	last := time.Now()
	ended := false // a terminal event was sent: nothing may follow it
	send := func(ev Event) error {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return nil
		}
		ev.V, ev.Seq = Version, seq+1
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if err := s.nc.PublishMsg(&nats.Msg{Subject: reply, Reply: ctrl, Data: b}); err != nil {
			return fmt.Errorf("event %s of %d bytes: %w", ev.Type, len(b), err)
		}
		seq++
		last = time.Now()
		ended = ev.Type == string(llm.EventDone) || ev.Type == string(llm.EventError)
		return nil
	}
	if err := send(Event{Type: TypeHeartbeat}); err != nil {
		s.cfg.log.Warn("llmbus: answer a request", "request", r.ID, "error", err)
		return
	}
	hbDone := make(chan struct{})
	var hb sync.WaitGroup
	defer func() { close(hbDone); hb.Wait() }()
	hb.Add(1)
	go func() {
		defer hb.Done()
		t := time.NewTicker(s.cfg.heartbeat / 2)
		defer t.Stop()
		for {
			select {
			case <-hbDone:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				mu.Lock()
				quiet := time.Since(last) >= s.cfg.heartbeat
				mu.Unlock()
				if quiet {
					_ = send(Event{Type: TypeHeartbeat})
				}
			}
		}
	}()

	model := r.Model
	if s.cfg.model != nil {
		s.cfg.model(&model)
	}
	opts := r.Options.stream()
	if s.cfg.options != nil {
		s.cfg.options(opts)
	}
	for ev := range llm.StreamProvider(ctx, s.p, &model, &r.Context, opts) {
		if err := send(wireEvent(ev)); err != nil {
			// Most likely an event over the NATS server's max payload (a huge final
			// message): tell the client in a small error event rather than leave it to
			// its idle timeout.
			s.cfg.log.Warn("llmbus: send an event", "request", r.ID, "error", err)
			cancel()
			_ = send(wireEvent(llm.ErrorEvent(&model, nil, llm.StopReasonError, fmt.Errorf("llmbus: the server could not send an event: %w", err))))
			return
		}
		if ctx.Err() != nil {
			// Cancelled by the client (or Stop): nobody reads the rest. The provider
			// saw the cancellation through ctx; stop ranging so it is released now.
			return
		}
	}
}
