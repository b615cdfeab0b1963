package im

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
)

// lastInboundSteps bounds how many inbox events LastInbound walks back over (events that carry
// no chat message: subagent results, reminders, aborts) before it gives the session inbox up.
const lastInboundSteps = 16

// LastInbound returns the last inbound message of chat k on the bus, and false when there is
// none (or the bus did not answer). Since issue 40 ingest stores a message once: inside its
// session inbox event on SESSION_IN when it reaches the session, on IM_IN otherwise
// (events.InboundMessage), so the chat's last message is the later of the last one on
// IM_IN's im.in.<...> subject and the last inbox event of agent.in.<sk> that carries one
// (found by following the inbox chain back over at most lastInboundSteps other events).
// "Later" is by stored time: the two streams' leaders stamp it, so two messages within their
// clock skew may come out in either order.
//
// It is a best-effort read for hints (a preview's reply target, a backfill cursor): any
// replica may answer, a lagging one with an older message.
func LastInbound(ctx context.Context, js jetstream.JetStream, k events.SessionKey) (events.IMMessage, bool) {
	var best events.IMMessage
	var bestTime int64
	found := false
	take := func(m *jetstream.RawStreamMsg) bool {
		ev, err := events.DecodeMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			return false
		}
		in, ok := events.InboundMessage(ev)
		if !ok {
			return false
		}
		if t := m.Time.UnixNano(); !found || t > bestTime {
			best, bestTime, found = *in, t, true
		}
		return true
	}
	if st, err := js.Stream(ctx, events.StreamIMIn); err == nil {
		if m, err := st.GetLastMsgForSubject(ctx, events.IMInSubject(k)); err == nil {
			take(m)
		}
	}
	st, err := js.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		return best, found
	}
	m, err := st.GetLastMsgForSubject(ctx, events.AgentInSubject(k))
	for step := 0; err == nil && step < lastInboundSteps; step++ {
		if take(m) {
			break
		}
		prev, ok := inbox.Prev(m.Header)
		if !ok || prev == 0 {
			break // the chain ends here (an unchained event, or the inbox's first)
		}
		m, err = st.GetMsg(ctx, prev)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break // removed by the stream's limits
		}
	}
	return best, found
}
