package approvals

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/tools"
)

// PendingWindow is how long a bash confirmation stays pending: "/approve" and "/approve always"
// answer a request of the last PendingWindow (seed: 近期 bash 待确认窗口), and a one-time
// approval must be used within it.
const PendingWindow = 10 * time.Minute

// maxPending bounds the requests kept per endpoint (the oldest go first).
const maxPending = 16

// Request is one bash command line that needed the owner's approval (execpolicy Ask).
type Request struct {
	// ID names the request for "/approve <id>" (8 hex digits, stable for the request).
	ID string `json:"id,omitempty"`
	// Commands are the normalized commands that need approval (execpolicy.Verdict.Pending).
	Commands []string `json:"commands"`
	Line     string   `json:"line"`              // the command line as the model wrote it
	Session  string   `json:"session"`           // session key it was asked in
	Turn     string   `json:"turn,omitempty"`    // the turn that asked
	Sender   string   `json:"sender,omitempty"`  // who the turn acted for
	At       int64    `json:"at"`                // Unix ms
	Once     bool     `json:"once,omitempty"`    // approved once by the owner (/approve), not yet used
	By       string   `json:"by,omitempty"`      // the owner who approved it
	Expires  int64    `json:"expires,omitempty"` // Unix ms: a one-time approval unused by then lapses
}

// Pending is an endpoint's open bash confirmations, in KV approvals under PendingKey.
type Pending struct {
	Requests []Request `json:"requests"` // oldest first
}

// PendingKey is the KV key of an endpoint's pending confirmations (next to Key's approvals).
func PendingKey(platform, bot string) string { return Key(platform, bot) + ".pending" }

// live drops what the window has passed and names requests recorded without an id.
func (p *Pending) live(now time.Time) {
	ms := now.UnixMilli()
	p.Requests = slices.DeleteFunc(p.Requests, func(r Request) bool {
		if r.Once {
			return r.Expires < ms
		}
		return ms-r.At > PendingWindow.Milliseconds()
	})
	for i := range p.Requests {
		if p.Requests[i].ID == "" {
			p.Requests[i].ID = requestID(p.Requests[i])
		}
	}
}

// requestID derives a request's id from where, when and what it asked: stable across reads,
// distinct between requests (the same commands asked again in the same session replace the
// older request, Record).
func requestID(r Request) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s", r.Session, r.At, r.Turn, r.Line)
	for _, c := range r.Commands {
		h.Write([]byte{0})
		h.Write([]byte(c))
	}
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// Waiting returns the requests still waiting for the owner (not yet approved once), oldest first.
func (p *Pending) Waiting() []Request {
	var out []Request
	for _, r := range p.Requests {
		if !r.Once {
			out = append(out, r)
		}
	}
	return out
}

// LoadPending returns the endpoint's live pending confirmations and the KV revision.
func (s *Store) LoadPending(ctx context.Context, platform, bot string) (*Pending, uint64, error) {
	e, err := s.kv.Get(ctx, PendingKey(platform, bot))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &Pending{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("load pending approvals %s/%s: %w", platform, bot, err)
	}
	var p Pending
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		// A damaged record must not block bash for good: start over (asks are re-recorded).
		return &Pending{}, e.Revision(), nil
	}
	p.live(time.Now())
	return &p, e.Revision(), nil
}

// updatePending applies fn under a revision CAS (retried on conflicts); fn reports whether it
// changed anything.
func (s *Store) updatePending(ctx context.Context, platform, bot string, fn func(*Pending) bool) error {
	key := PendingKey(platform, bot)
	return retryConflicts(ctx, "store pending approvals "+platform+"/"+bot, func() error {
		p, rev, err := s.LoadPending(ctx, platform, bot)
		if err != nil {
			return err
		}
		if !fn(p) {
			return nil
		}
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		return s.put(ctx, key, b, rev)
	})
}

// Record notes that r needed the owner's approval (r.At is set when zero). The same command
// line asked again in the same session replaces the older request and keeps its id.
func (s *Store) Record(ctx context.Context, platform, bot string, r Request) error {
	if r.At == 0 {
		r.At = time.Now().UnixMilli()
	}
	return s.updatePending(ctx, platform, bot, func(p *Pending) bool {
		r := r
		p.Requests = slices.DeleteFunc(p.Requests, func(o Request) bool {
			same := !o.Once && o.Session == r.Session && slices.Equal(o.Commands, r.Commands)
			if same && r.ID == "" {
				r.ID = o.ID // asked again: the id the owner may have been shown stays valid
			}
			return same
		})
		if r.ID == "" {
			r.ID = requestID(r)
		}
		p.Requests = append(p.Requests, r)
		if len(p.Requests) > maxPending {
			p.Requests = p.Requests[len(p.Requests)-maxPending:]
		}
		return true
	})
}

// HasPending reports whether a confirmation was asked on the endpoint within PendingWindow
// (what "/approve always" needs).
func (s *Store) HasPending(ctx context.Context, platform, bot string) (bool, error) {
	p, _, err := s.LoadPending(ctx, platform, bot)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(p.Requests, func(r Request) bool { return !r.Once }), nil
}

// ErrNothingPending: "/approve" found no confirmation of its chat asked within PendingWindow.
var ErrNothingPending = errors.New("approvals: no bash command of this chat is waiting for approval (requests lapse after 10 minutes)")

// ErrUnknownRequest: "/approve <id>" named no request waiting within PendingWindow.
var ErrUnknownRequest = errors.New("approvals: no bash command with that id is waiting for approval (requests lapse after 10 minutes)")

// ApproveOnce is the owner's "/approve": a waiting request becomes a one-time approval, used by
// the next run of the same commands in its session within PendingWindow. Without an id it is
// the newest request of session (the chat the owner typed "/approve" in), never one of another
// chat: approving a request of another chat takes its id (a unique prefix of at least 4 digits
// will do), so the owner sees which command of which chat they let run. Errors:
// ErrNothingPending, ErrUnknownRequest.
func (s *Store) ApproveOnce(ctx context.Context, platform, bot, by, session, id string) (Request, error) {
	id = strings.ToLower(strings.TrimSpace(id))
	var got Request
	var ambiguous bool
	err := s.updatePending(ctx, platform, bot, func(p *Pending) bool {
		i := -1
		for j := len(p.Requests) - 1; j >= 0; j-- {
			r := p.Requests[j]
			switch {
			case r.Once:
			case id == "":
				if r.Session == session {
					i = j
					j = -1 // the newest of the chat
				}
			case len(id) >= 4 && strings.HasPrefix(r.ID, id):
				if i >= 0 {
					ambiguous = true
					return false
				}
				i = j
			}
		}
		if i < 0 {
			return false
		}
		r := &p.Requests[i]
		r.Once, r.By, r.Expires = true, by, time.Now().Add(PendingWindow).UnixMilli()
		got = *r
		return true
	})
	switch {
	case err != nil:
		return Request{}, err
	case ambiguous:
		return Request{}, fmt.Errorf("%w: %q names more than one request; give more of its id", ErrUnknownRequest, id)
	case got.Line == "" && len(got.Commands) == 0 && id != "":
		return Request{}, fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	case got.Line == "" && len(got.Commands) == 0:
		return Request{}, ErrNothingPending
	}
	return got, nil
}

// Consume decides whether a command that needs approval may run now without asking, and uses
// the approval up: an owner's one-time approval (ApproveOnce) of the same commands in the same
// session, or — when the call acts for a master (the owner themselves) in a later turn of the
// session that asked — the owner's own answer to that question (seed: 用户确认后 AI 再执行).
// A request from the same turn never counts: the model cannot approve its own call.
func (s *Store) Consume(ctx context.Context, platform, bot string, r Request, master bool) (bool, error) {
	ok := false
	err := s.updatePending(ctx, platform, bot, func(p *Pending) bool {
		i := slices.IndexFunc(p.Requests, func(o Request) bool {
			if o.Session != r.Session || !slices.Equal(o.Commands, r.Commands) {
				return false
			}
			return o.Once || master && o.Turn != "" && o.Turn != r.Turn
		})
		if i < 0 {
			return false
		}
		p.Requests = slices.Delete(p.Requests, i, i+1)
		ok = true
		return true
	})
	return ok, err
}

// BashConfirmations adapts a Store to the bash tool's builtin.Confirmations: requests are
// kept per endpoint (env's platform and bot), scoped to env's session and turn.
type BashConfirmations struct{ Store *Store }

// Consume: see Store.Consume; master is whether env acts for a master.
func (b BashConfirmations) Consume(ctx context.Context, env tools.Env, commands []string) (bool, error) {
	return b.Store.Consume(ctx, env.Platform, env.BotID, Request{Commands: commands, Session: env.SessionKey, Turn: env.Turn},
		slices.Contains(env.SenderRoles, tools.RoleMaster))
}

// Record: see Store.Record.
func (b BashConfirmations) Record(ctx context.Context, env tools.Env, commands []string, line string) error {
	return b.Store.Record(ctx, env.Platform, env.BotID, Request{Commands: commands, Line: line, Session: env.SessionKey,
		Turn: env.Turn, Sender: env.SenderID})
}
