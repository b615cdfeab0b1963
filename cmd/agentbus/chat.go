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

	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/ingest"
)

func cmdChat(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	bus := addBusFlags(fs)
	user := fs.String("user", os.Getenv("USER"), "your user id in the console scene")
	wait := fs.Duration("wait", 60*time.Second, "after the input ends, how long to wait for outstanding replies")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" {
		*user = "operator"
	}
	nc, err := bus.dial("agentbus chat")
	if err != nil {
		return err
	}
	defer nc.Close()
	sk := events.SessionKey{Platform: ingest.PlatformConsole, Bot: ingest.ConsoleBot, Scope: events.ScopePrivate, Scene: *user}

	var mu sync.Mutex
	// owed counts messages acked as routed to the AI or a command, got the first reply parts
	// that arrived: a reply can beat its message's ack, so they are counted apart.
	owed, got := 0, 0
	streamed := map[string]bool{}
	lastMsg := map[string]int{}
	done := make(chan struct{}, 64)
	live, err := nc.Subscribe(events.AgentLiveSubject(sk), func(m *nats.Msg) {
		var ev events.Event[events.LiveDelta]
		if events.UnmarshalMsg(m, &ev) != nil {
			return
		}
		turn, d := ev.Turn, ev.Data
		mu.Lock()
		defer mu.Unlock()
		if !streamed[turn] {
			fmt.Fprint(stdout, "bot> ")
			streamed[turn] = true
		} else if lastMsg[turn] != d.Message { // the next assistant message of the turn
			fmt.Fprint(stdout, "\n     ")
		}
		lastMsg[turn] = d.Message
		fmt.Fprint(stdout, d.Delta)
	})
	if err != nil {
		return err
	}
	defer live.Unsubscribe()
	out, err := nc.Subscribe(egress.ConsoleSubject(ingest.ConsoleBot, *user), func(m *nats.Msg) {
		var ev events.Event[events.Outbound]
		if events.UnmarshalMsg(m, &ev) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if streamed[ev.Data.Turn] && ev.Data.Part == 0 {
			fmt.Fprintln(stdout)
		} else {
			fmt.Fprintf(stdout, "bot> %s\n", renderSegments(ev.Data.Content))
		}
		if ev.Data.Part == 0 {
			got++
			select {
			case done <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return err
	}
	defer out.Unsubscribe()
	if err := nc.Flush(); err != nil { // replies must not beat the subscriptions
		return err
	}

	fmt.Fprintf(stdout, "connected to %s as %s (master). Type a message; /help lists commands; Ctrl-D quits.\n", nc.ConnectedUrlRedacted(), *user)
	sc := bufio.NewScanner(stdin)
	n := 0
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		n++
		line := ingest.ConsoleLine{ID: fmt.Sprintf("%s-%d-%d", *user, time.Now().UnixNano(), n), User: *user, Text: text}
		b, _ := json.Marshal(line)
		resp, err := request(ctx, nc, b)
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		var ack ingest.ConsoleAck
		_ = json.Unmarshal(resp.Data, &ack)
		if ack.Error != "" {
			fmt.Fprintln(stdout, "error:", ack.Error)
			continue
		}
		if ack.Route == "ai" || ack.Route == "command" {
			mu.Lock()
			owed++
			mu.Unlock()
		}
	}
	// Input ended (Ctrl-D or a pipe): wait for the replies still owed.
	deadline := time.After(*wait)
	for {
		mu.Lock()
		p := owed - got
		mu.Unlock()
		if p <= 0 {
			return nil
		}
		select {
		case <-done:
		case <-deadline:
			return fmt.Errorf("%d replies did not arrive within %s", p, *wait)
		case <-ctx.Done():
			return nil
		}
	}
}

// request sends a console line, waiting a little for ingest when it is (re)starting.
func request(ctx context.Context, nc *nats.Conn, b []byte) (*nats.Msg, error) {
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := nc.RequestWithContext(rctx, ingest.ConsoleInSubject, b)
		cancel()
		if !errors.Is(err, nats.ErrNoResponders) || attempt == 20 {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func renderSegments(ss events.Segments) string {
	var b strings.Builder
	for _, s := range ss {
		switch s.Type {
		case events.SegText:
			b.WriteString(s.Str("text"))
		case events.SegImage:
			b.WriteString("[image: " + s.MediaRef() + "]")
		default:
			b.WriteString("[" + s.Type + "]")
		}
	}
	return b.String()
}
