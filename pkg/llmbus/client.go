package llmbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Client defaults.
const (
	// DefaultIdleTimeout is how long the client waits for any message (an event or a
	// heartbeat) before it gives up on the server.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultAttempts is how many times a request is sent while nobody listens on the subject
	// (a provider service restarting), the first included.
	DefaultAttempts = 3
	// DefaultRetryWait is the wait before the second attempt; it doubles for each further one.
	DefaultRetryWait = 250 * time.Millisecond
	// MaxRetryWait caps the doubling wait between attempts.
	MaxRetryWait = 5 * time.Second
)

// Client is an llm.Provider that sends each call to a provider service on the bus and streams
// its reply (see the package doc for the contract). It is safe for concurrent use; each
// Stream call has its own reply inbox.
type Client struct {
	nc       *nats.Conn
	subject  string
	idle     time.Duration
	attempts int
	wait     time.Duration
}

// ClientOption configures a Client.
type ClientOption func(*Client) error

// WithIdleTimeout sets how long the client waits for the next message of a reply stream
// (default DefaultIdleTimeout). It must be longer than the server's heartbeat interval.
func WithIdleTimeout(d time.Duration) ClientOption {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("%w: idle timeout %s", ErrInvalidOption, d)
		}
		c.idle = d
		return nil
	}
}

// WithAttempts sets how many times a request is sent while the subject has no responders
// (default DefaultAttempts; 1 = no retry), waiting wait before the second attempt and twice
// as long before each further one, at most MaxRetryWait.
func WithAttempts(n int, wait time.Duration) ClientOption {
	return func(c *Client) error {
		if n < 1 || wait < 0 {
			return fmt.Errorf("%w: %d attempts, wait %s", ErrInvalidOption, n, wait)
		}
		c.attempts, c.wait = n, wait
		return nil
	}
}

// NewClient returns a client of the provider service on subject, over nc. The connection
// stays the caller's: the client never closes it.
func NewClient(nc *nats.Conn, subject string, opts ...ClientOption) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	if err := CheckSubject(subject); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
	}
	c := &Client{nc: nc, subject: subject, idle: DefaultIdleTimeout, attempts: DefaultAttempts, wait: DefaultRetryWait}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// CheckSubject reports what is wrong with subject as a provider subject: it must be a literal
// NATS subject (no wildcards, no spaces, no empty tokens).
func CheckSubject(subject string) error {
	if subject == "" {
		return errors.New("empty subject")
	}
	if strings.ContainsAny(subject, " \t\r\n*>") {
		return fmt.Errorf("subject %q: no spaces or wildcards", subject)
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" {
			return fmt.Errorf("subject %q: empty token", subject)
		}
	}
	return nil
}

// Subject returns the subject the client sends to.
func (c *Client) Subject() string { return c.subject }

// Stream sends the call to the service and yields its events. It follows llm.Provider's
// contract: every failure arrives as the terminal error event, never as a panic.
//
// While nobody listens on the subject the request is sent again (WithAttempts), each wait
// reported to the hook of llm.WithRetryHook; after the last attempt the error names "no
// responders". Cancelling ctx, or breaking out of the range, sends the server a cancel
// message and drops the reply inbox; the stream then ends with StopReasonAborted (or, after a
// break, yields nothing more).
func (c *Client) Stream(ctx context.Context, model *llm.Model, lc *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	return func(yield func(llm.Event) bool) {
		if opts == nil {
			opts = &llm.StreamOptions{}
		}
		b := newBuilder(model, yield)
		if ctx.Err() != nil {
			b.fail(ctx, ctx.Err())
			return
		}
		if lc == nil {
			lc = &llm.Context{}
		}
		req := Request{V: Version, ID: nuid.Next(), Model: *model, Context: *lc, Options: optionsFrom(opts)}
		body, err := json.Marshal(req)
		if err != nil {
			b.fail(ctx, fmt.Errorf("llmbus: encode request: %w", err))
			return
		}
		s, err := c.open(ctx, body)
		if err != nil {
			b.fail(ctx, err)
			return
		}
		defer s.close()
		for {
			m := s.first
			s.first = nil
			if m == nil {
				if m, err = s.next(ctx); err != nil {
					s.cancel()
					b.fail(ctx, err)
					return
				}
			}
			if m.Reply != "" {
				s.ctrl = m.Reply
			}
			var ev Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				s.cancel()
				b.fail(ctx, fmt.Errorf("%w: subject %q: undecodable event: %v", ErrProtocol, c.subject, err))
				return
			}
			if ev.V != Version {
				s.cancel()
				b.fail(ctx, fmt.Errorf("%w: subject %q: event version %d, this client speaks %d", ErrProtocol, c.subject, ev.V, Version))
				return
			}
			if ev.Seq != s.seq+1 {
				s.cancel()
				b.fail(ctx, fmt.Errorf("%w: subject %q: event seq %d after %d (lost or reordered events)", ErrProtocol, c.subject, ev.Seq, s.seq))
				return
			}
			s.seq = ev.Seq
			end, err := b.apply(ev)
			if err != nil {
				s.cancel()
				b.fail(ctx, fmt.Errorf("%w: subject %q: %v", ErrProtocol, c.subject, err))
				return
			}
			if end {
				return
			}
			if b.stopped {
				s.cancel() // the consumer broke out of the range
				return
			}
		}
	}
}

// stream is one open request: its reply inbox and what the server told it.
type stream struct {
	c     *Client
	sub   *nats.Subscription
	first *nats.Msg // the first reply, read while checking for responders
	ctrl  string    // the server's control subject (reply subject of its events)
	seq   int
	// unwatch stops the AfterFunc that unsubscribes when ctx ends.
	unwatch func() bool
}

// open sends the request, retrying while nobody listens, and returns once the first reply is
// in.
func (c *Client) open(ctx context.Context, body []byte) (*stream, error) {
	for attempt := 1; ; attempt++ {
		s, err := c.send(ctx, body)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, ErrNoResponders) || attempt >= c.attempts {
			if errors.Is(err, ErrNoResponders) && attempt > 1 {
				err = fmt.Errorf("%w (after %d attempts)", err, attempt)
			}
			return nil, err
		}
		wait := min(c.wait<<(attempt-1), MaxRetryWait)
		if h := llm.RetryHook(ctx); h != nil {
			h(llm.Retry{Attempt: attempt, StatusCode: 503, Reason: llm.RetryTransport, Wait: wait})
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (c *Client) send(ctx context.Context, body []byte) (*stream, error) {
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("llmbus: subscribe to the reply inbox: %w", err)
	}
	// A reply stream is as long as the answer; never drop part of it for a slow reader.
	_ = sub.SetPendingLimits(-1, 256<<20)
	s := &stream{c: c, sub: sub, unwatch: context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })}
	msg := &nats.Msg{Subject: c.subject, Reply: inbox, Data: body, Header: nats.Header{VersionHeader: []string{"1"}}}
	injectTrace(ctx, msg.Header)
	if err := c.nc.PublishMsg(msg); err != nil {
		s.close()
		return nil, fmt.Errorf("llmbus: publish request to %q: %w", c.subject, err)
	}
	m, err := s.next(ctx)
	if err != nil {
		s.close()
		return nil, err
	}
	s.first = m
	return s, nil
}

// next waits for the next reply message. A no-responders status becomes ErrNoResponders.
func (s *stream) next(ctx context.Context) (*nats.Msg, error) {
	// NextMsg with a timeout rather than NextMsgWithContext: a context and a timer per event
	// cost more than the event; ctx is watched once per stream instead (open: AfterFunc
	// drops the subscription, which ends the wait).
	m, err := s.sub.NextMsg(s.c.idle)
	switch {
	case err == nil && len(m.Data) == 0 && m.Header.Get("Status") == "503", errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w on subject %q: no provider service is listening", ErrNoResponders, s.c.subject)
	case err == nil && s.seq == 0 && m.Header.Get(micro.ErrorCodeHeader) == "503":
		// A server that is stopping refused the request: like no responders, worth another
		// attempt (the queue group has other members, or the server comes back).
		return nil, fmt.Errorf("%w on subject %q: %s", ErrNoResponders, s.c.subject, m.Header.Get(micro.ErrorHeader))
	case err == nil:
		return m, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w: subject %q sent nothing for %s", ErrIdle, s.c.subject, s.c.idle)
	}
	return nil, fmt.Errorf("llmbus: read reply from %q: %w", s.c.subject, err)
}

// cancel tells the server to stop, when it has said where to (best effort: a server that
// never hears it notices the dropped inbox on its next send).
func (s *stream) cancel() {
	if s.ctrl == "" {
		return
	}
	b, _ := json.Marshal(Control{V: Version, Type: TypeCancel})
	_ = s.c.nc.Publish(s.ctrl, b)
	s.ctrl = ""
}

func (s *stream) close() {
	s.unwatch()
	_ = s.sub.Unsubscribe()
}
