// Package console is the console platform: `agentbus chat` (and anything else on the bus)
// sends lines as core NATS requests to InSubject, the ingest role answers each with an Ack, and
// egress publishes the replies on Subject(bot, scene). Live deltas come from agent.live as for
// every platform. Whoever can reach the bus is the operator, so console users are masters of
// the console bot, each in a private scene of their own.
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

const (
	// Platform is the console's platform name in session keys.
	Platform = "console"
	// Bot is the console's one bot.
	Bot = "console"
	// InSubject takes console lines (a queue group "ingest" shares them across replicas).
	InSubject = "console.in"
	// Prefix is the core NATS subject prefix of console replies.
	Prefix = "console.out"
)

// Subject is console.out.<bot>.<scene> (tokens encoded with events.EncodeToken): where the
// console platform's replies go. `agentbus chat` subscribes to it (or to console.out.<bot>.>
// for every scene of a bot).
func Subject(bot, scene string) string {
	return Prefix + "." + events.EncodeToken(bot) + "." + events.EncodeToken(scene)
}

// Line is one line typed into `agentbus chat`.
type Line struct {
	ID   string `json:"id"`
	User string `json:"user"`
	Name string `json:"name,omitempty"`
	Text string `json:"text"`
}

// Ack answers a Line.
type Ack struct {
	Accepted bool   `json:"accepted"`
	Route    string `json:"route,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Serve answers console lines on nc until the returned subscription is unsubscribed: each line
// becomes an IM message of the console bot's private scene of the user and goes to in. It
// returns once the server has the subscription, so a caller can tell users the console works.
func Serve(nc *nats.Conn, in im.Ingester, log *slog.Logger) (*nats.Subscription, error) {
	sub, err := nc.QueueSubscribe(InSubject, "ingest", func(msg *nats.Msg) {
		var line Line
		ack := Ack{}
		if err := json.Unmarshal(msg.Data, &line); err != nil || line.ID == "" || line.User == "" {
			ack.Error = "want JSON {id, user, text}"
			reply(msg, ack)
			return
		}
		m := &events.IMMessage{
			Platform: Platform, Bot: Bot, MessageID: line.ID,
			Scene:   events.Scene{Type: events.ScopePrivate, ID: line.User},
			Sender:  events.Sender{ID: line.User, Name: line.Name},
			Content: events.Segments{events.TextSeg(line.Text)}, Time: time.Now().UnixMilli(),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := in.Accept(ctx, m)
		if err != nil {
			log.Warn("console line rejected", "err", err)
			ack.Error = err.Error()
		} else {
			ack.Accepted = true
			ack.Route = res.Route
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

// Sender delivers console parts on core NATS: the message on Subject(bot, scene) is the im.out
// event itself (JSON envelope + correlation headers, decode it with events.UnmarshalMsg into an
// events.Event[events.Outbound]). Core NATS has no receipt, so a part counts as delivered once
// published; the platform message id is the out id.
type Sender struct {
	nc *nats.Conn
}

// NewSender returns a sender publishing on nc.
func NewSender(nc *nats.Conn) *Sender { return &Sender{nc: nc} }

// Send implements im.Sender.
func (s *Sender) Send(ctx context.Context, out events.Outbound) (string, error) {
	return s.SendEvent(ctx, events.New(out))
}

// SendEvent implements im.EventSender: the event goes out whole, correlation ids included.
func (s *Sender) SendEvent(_ context.Context, ev *events.Event[events.Outbound]) (string, error) {
	msg, err := events.NewMsg(Subject(ev.Data.Bot, ev.Data.Scene.ID), ev)
	if err != nil {
		return "", fmt.Errorf("%w: %w", events.ErrInvalid, err)
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		return "", fmt.Errorf("console: publish: %w", err)
	}
	return ev.Data.OutID, nil
}

// Adapter registers the console with the composition root. The console has no configuration:
// it always runs, and its users are masters (see the package doc).
var Adapter = im.Platform{
	Name: Platform,
	NewInbound: func(ctx context.Context, cfg *config.Config, d im.InboundDeps) (im.Inbound, error) {
		sub, err := Serve(d.NC, d.Ingester, d.Log)
		if err != nil {
			return im.Inbound{}, err
		}
		return im.Inbound{Run: []im.Runner{func(ctx context.Context) {
			<-ctx.Done()
			_ = sub.Unsubscribe()
		}}}, nil
	},
	NewSender: func(ctx context.Context, cfg *config.Config, d im.SenderDeps) (im.Sender, error) {
		return NewSender(d.NC), nil
	},
}
