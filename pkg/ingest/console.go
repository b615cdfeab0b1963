package ingest

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
)

// The console adapter: `agentbus chat` sends lines as NATS requests to ConsoleInSubject and
// reads replies from egress.ConsoleSubject and live deltas from agent.live.
const (
	PlatformConsole  = "console"
	ConsoleBot       = "console"
	ConsoleInSubject = "console.in"
)

// ConsoleLine is one line typed into `agentbus chat`.
type ConsoleLine struct {
	ID   string `json:"id"`
	User string `json:"user"`
	Name string `json:"name,omitempty"`
	Text string `json:"text"`
}

// ConsoleAck answers a ConsoleLine.
type ConsoleAck struct {
	Accepted bool   `json:"accepted"`
	Route    string `json:"route,omitempty"`
	Error    string `json:"error,omitempty"`
}

// ServeConsole answers console lines. Whoever can reach the bus is the operator, so console
// users are masters of the console bot (private scene per user).
func ServeConsole(nc *nats.Conn, in *Ingestor, log *slog.Logger) (*nats.Subscription, error) {
	sub, err := nc.QueueSubscribe(ConsoleInSubject, "ingest", func(msg *nats.Msg) {
		var line ConsoleLine
		ack := ConsoleAck{}
		if err := json.Unmarshal(msg.Data, &line); err != nil || line.ID == "" || line.User == "" {
			ack.Error = "want JSON {id, user, text}"
			reply(msg, ack)
			return
		}
		m := &events.IMMessage{
			Platform: PlatformConsole, Bot: ConsoleBot, MessageID: line.ID,
			Scene:   events.Scene{Type: events.ScopePrivate, ID: line.User},
			Sender:  events.Sender{ID: line.User, Name: line.Name},
			Content: events.Segments{events.TextSeg(line.Text)}, Time: time.Now().UnixMilli(),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := in.Ingest(ctx, m)
		if err != nil {
			log.Warn("console line rejected", "err", err)
			ack.Error = err.Error()
		} else {
			ack.Accepted = true
			if len(res.Decision.Routes) > 0 {
				ack.Route = res.Decision.Routes[0].String()
			}
		}
		reply(msg, ack)
	})
	if err != nil {
		return nil, err
	}
	// Make sure the server has the subscription before anyone is told agentbus is running.
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}

func reply(msg *nats.Msg, v any) {
	b, _ := json.Marshal(v)
	_ = msg.Respond(b)
}
