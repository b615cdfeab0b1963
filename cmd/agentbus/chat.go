package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im/console"
)

// errBusGone: the connection to agentbus closed (the server stopped) and did not come back.
var errBusGone = errors.New("lost the connection to agentbus (the server stopped?)")

func cmdChat(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	bus := addBusFlags(fs)
	user := fs.String("user", os.Getenv("USER"), "your user `id` in the console scene")
	wait := fs.Duration("wait", 60*time.Second, "after the input ends, how long to wait for outstanding replies")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "agentbus chat — talk to a running agentbus from the terminal, as a master of the console bot.\n"+
			"Replies stream as the model writes them. Lines starting with / are commands (/help lists them).\n\nUsage:\n  agentbus chat [flags]\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), clientEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" {
		*user = "operator"
	}
	view := newChatView(stdout)
	gone := make(chan struct{})
	var goneOnce sync.Once
	// A server that restarts is waited for a few seconds; one that stopped ends the chat.
	nc, err := bus.dial("agentbus chat", nats.MaxReconnects(10), nats.ReconnectWait(500*time.Millisecond),
		nats.ClosedHandler(func(*nats.Conn) { goneOnce.Do(func() { close(gone) }) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close at the end
				view.line("(lost the connection to agentbus; trying again for a few seconds)")
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { view.line("(connected again)") }))
	if err != nil {
		return err
	}
	defer nc.Close()
	serverURL := nc.ConnectedUrlRedacted()
	lost := func() error { return fmt.Errorf("%w: %s", errBusGone, serverURL) }
	sk := events.SessionKey{Platform: console.Platform, Bot: console.Bot, Scope: events.ScopePrivate, Scene: *user}

	// One channel for both subscriptions: the client library hands each subscription its own
	// goroutine, so two handlers would see live deltas and final parts in no fixed order; one
	// channel keeps the order in which the server sent them.
	in := make(chan *nats.Msg, 1<<14)
	for _, subj := range []string{events.AgentLiveSubject(sk), console.Subject(console.Bot, *user)} {
		sub, err := nc.ChanSubscribe(subj, in)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
	}
	if err := nc.Flush(); err != nil { // replies must not beat the subscriptions
		return err
	}
	liveSubj := events.AgentLiveSubject(sk)
	renderDone := make(chan struct{})
	defer func() { <-renderDone }()
	rctx, stopRender := context.WithCancel(ctx)
	defer stopRender()
	go func() {
		defer close(renderDone)
		for {
			select {
			case m := <-in:
				if m.Subject == liveSubj {
					var ev events.Event[events.LiveDelta]
					if events.UnmarshalMsg(m, &ev) == nil {
						view.delta(ev.Turn, ev.Data)
					}
					continue
				}
				var ev events.Event[events.Outbound]
				if events.UnmarshalMsg(m, &ev) == nil {
					view.part(ev.Data)
				}
			case <-rctx.Done():
				return
			}
		}
	}()

	view.line(fmt.Sprintf("connected to %s as %s (master). Type a message; /help lists commands; Ctrl-D quits.", serverURL, *user))
	lines := make(chan string)
	go func() { // stdin cannot be interrupted; this goroutine ends with the process or the input
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-gone:
				return
			}
		}
	}()
	owed, n := 0, 0
	for reading := true; reading; {
		select {
		case text, ok := <-lines:
			if !ok {
				reading = false
				break
			}
			text = strings.TrimSpace(text)
			if text == "" {
				continue
			}
			n++
			line := console.Line{ID: fmt.Sprintf("%s-%d-%d", *user, time.Now().UnixNano(), n), User: *user, Text: text}
			b, _ := json.Marshal(line)
			resp, err := request(ctx, nc, gone, b)
			if err != nil {
				if isGone(gone) {
					return lost()
				}
				return fmt.Errorf("send: %w", err)
			}
			var ack console.Ack
			_ = json.Unmarshal(resp.Data, &ack)
			if ack.Error != "" {
				view.line("error: " + ack.Error)
				continue
			}
			if ack.Route == "ai" || ack.Route == "command" {
				owed++
			}
		case <-gone:
			return lost()
		case <-ctx.Done():
			return nil
		}
	}
	// Input ended (Ctrl-D or a pipe): wait for the replies still owed.
	deadline := time.After(*wait)
	for {
		got, changed := view.completed()
		if got >= owed {
			return nil
		}
		select {
		case <-changed:
		case <-gone:
			return lost()
		case <-deadline:
			return fmt.Errorf("%d replies did not arrive within %s", owed-got, *wait)
		case <-ctx.Done():
			return nil
		}
	}
}

func isGone(gone <-chan struct{}) bool {
	select {
	case <-gone:
		return true
	default:
		return false
	}
}

// request sends a console line, waiting a little for ingest when it is (re)starting. It gives
// up at once when the connection is gone.
func request(ctx context.Context, nc *nats.Conn, gone <-chan struct{}, b []byte) (*nats.Msg, error) {
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		go func() {
			select {
			case <-gone:
				cancel()
			case <-rctx.Done():
			}
		}()
		resp, err := nc.RequestWithContext(rctx, console.InSubject, b)
		cancel()
		if isGone(gone) {
			return nil, errBusGone
		}
		if !errors.Is(err, nats.ErrNoResponders) || attempt == 20 {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-gone:
			return nil, errBusGone
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// chatView renders replies on a terminal. Live text streams for one turn at a time (the
// oldest one still running); the text of turns running at the same time is held back and
// printed whole, in order, when the turn on screen ends, so concurrent turns never interleave.
// A turn's final parts complete what its live text showed instead of printing it again, and
// every reply ends with a newline. Safe for concurrent use.
type chatView struct {
	mu      sync.Mutex
	w       io.Writer
	turns   map[string]*turnView
	order   []*turnView // turns with output, oldest first; order[0] is the one on screen
	done    int         // replies completed
	changed chan struct{}
	// ended remembers the last turns that completed, so their late deltas are dropped.
	ended     map[string]bool
	endedList []string
}

type turnView struct {
	id       string
	live     bool   // live text was shown (or held) for it
	message  int    // index of the assistant message the live text belongs to
	seq      uint64 // last live delta applied
	cur      string // text of the current live message
	final    string // text of the final parts so far
	started  bool   // "bot> " was written
	held     strings.Builder
	complete bool
}

func newChatView(w io.Writer) *chatView {
	return &chatView{w: w, turns: map[string]*turnView{}, changed: make(chan struct{}), ended: map[string]bool{}}
}

func (v *chatView) turn(id string) *turnView {
	t := v.turns[id]
	if t == nil {
		t = &turnView{id: id}
		v.turns[id] = t
		v.order = append(v.order, t)
	}
	return t
}

// emit writes s for t: to the screen when t is on screen, else into t's held text.
func (v *chatView) emit(t *turnView, s string) {
	if len(v.order) > 0 && v.order[0] == t {
		fmt.Fprint(v.w, s)
		return
	}
	t.held.WriteString(s)
}

func (v *chatView) begin(t *turnView) {
	if !t.started {
		t.started = true
		v.emit(t, "bot> ")
	}
}

func (v *chatView) delta(turn string, d events.LiveDelta) {
	if d.Kind != "text_delta" || d.Delta == "" || turn == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ended[turn] {
		return
	}
	t := v.turn(turn)
	if t.complete || (t.seq != 0 && d.Seq <= t.seq) {
		return // late or out of order
	}
	t.seq = d.Seq
	v.begin(t)
	if t.live && d.Message != t.message { // the next assistant message of the turn
		v.emit(t, "\n     ")
		t.cur = ""
	}
	t.live, t.message = true, d.Message
	t.cur += d.Delta
	v.emit(t, d.Delta)
}

func (v *chatView) part(o events.Outbound) {
	v.mu.Lock()
	defer v.mu.Unlock()
	id := o.Turn
	if id == "" {
		id = "out:" + o.OutID
	}
	if v.ended[id] {
		return
	}
	t := v.turn(id)
	if t.complete {
		return
	}
	text := renderSegments(o.Content)
	v.begin(t)
	switch f := t.final + text; {
	case t.live && strings.HasPrefix(t.cur, f):
		// the live text showed this part already
	case t.live && strings.HasPrefix(f, t.cur):
		v.emit(t, f[len(t.cur):])
		t.cur = f
	case t.live:
		// The final text is not what streamed (an error, a rewritten reply): show it whole.
		v.emit(t, "\n     "+text)
		t.live, t.cur = false, ""
	default:
		if o.Part > 0 && isMedia(o.Content) {
			text = "\n     " + text
		}
		v.emit(t, text)
	}
	t.final += text
	if o.Final || o.Turn == "" {
		v.finish(t)
	}
}

// finish ends t's reply and, when it was on screen, brings the next turn on screen.
func (v *chatView) finish(t *turnView) {
	v.emit(t, "\n")
	t.complete = true
	v.done++
	close(v.changed)
	v.changed = make(chan struct{})
	v.ended[t.id] = true
	v.endedList = append(v.endedList, t.id)
	if len(v.endedList) > 1024 {
		delete(v.ended, v.endedList[0])
		v.endedList = v.endedList[1:]
	}
	for len(v.order) > 0 && v.order[0].complete {
		delete(v.turns, v.order[0].id)
		v.order = v.order[1:]
		if len(v.order) > 0 {
			next := v.order[0]
			fmt.Fprint(v.w, next.held.String())
			next.held.Reset()
		}
	}
}

// line prints a line of the client's own; a reply being streamed is not cut.
func (v *chatView) line(s string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.order) > 0 && v.order[0].started {
		fmt.Fprint(v.w, "\n"+s+"\n     ") // the reply on screen goes on, indented
		return
	}
	fmt.Fprintln(v.w, s)
}

// completed returns the number of completed replies and a channel closed at the next one.
func (v *chatView) completed() (int, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.done, v.changed
}

func isMedia(ss events.Segments) bool {
	for _, s := range ss {
		if s.Type != events.SegText {
			return true
		}
	}
	return false
}

func renderSegments(ss events.Segments) string {
	var b strings.Builder
	for _, s := range ss {
		switch s.Type {
		case events.SegText:
			b.WriteString(s.Str("text"))
		case events.SegImage:
			b.WriteString("[image: " + s.MediaRef() + "]")
		case events.SegCard: // the console has no buttons: the card's text; answer in words
			c, _ := s.Card()
			b.WriteString(c.PlainText())
		default:
			b.WriteString("[" + s.Type + "]")
		}
	}
	return b.String()
}
