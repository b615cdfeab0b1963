package ownership

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// ringEntry is one delivery on its way to its owner's doorbell.
type ringEntry struct {
	sk    events.SessionKey
	epoch uint64
	d     Delivery
}

// ring hands the deliveries of sk over to its owner (see ringLocked).
func (o *Manager) ring(sk events.SessionKey, owner string, epoch uint64, ds []Delivery) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ringLocked(sk, owner, epoch, ds)
}

// ringLocked queues the deliveries of sk for its owner's doorbell; ringBells sends them.
//
// A ring is one core NATS message, not a request: the owner holds the deliveries it hands over
// from the moment it reads it, and nothing waits for an answer. It used to be a request per
// delivery, whose answer brought the owner's verdict: with two replicas that was two more
// messages, a goroutine and a reply subscription for every other turn, the whole of a turn's
// extra bus traffic. A ring that is lost (the owner's process died, or its connection is
// reconnecting) costs no event: the owner did not take the deliveries, so they come back after
// AckWait, and by then the probes (peers.go) have taken a dead owner's sessions over, whose
// actors read the inbox from the cursor and hear it from then on. The owner speaks up only
// when it did not run a session it was rung for (a notice back to the ringer's doorbell).
func (o *Manager) ringLocked(sk events.SessionKey, owner string, epoch uint64, ds []Delivery) {
	if o.ctx.Err() != nil || len(ds) == 0 {
		return // a stopping worker's deliveries are redelivered
	}
	for _, d := range ds {
		o.bells[owner] = append(o.bells[owner], ringEntry{sk: sk, epoch: epoch, d: d})
	}
	select {
	case o.bellWake <- struct{}{}:
	default:
	}
}

// ringBells sends the queued rings until the worker stops: each time it wakes, one ring per
// owner with every delivery queued for it meanwhile, so under load a ring carries several.
func (o *Manager) ringBells() {
	defer o.wg.Done()
	spare := map[string][]ringEntry{}
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-o.bellWake:
		}
		o.mu.Lock()
		rings := o.bells
		o.bells = spare
		o.mu.Unlock()
		for owner, rs := range rings {
			o.ringBatch(owner, rs)
		}
		clear(rings)
		spare = rings
	}
}

// ringBatch rings owner's doorbell once, handing rs over.
func (o *Manager) ringBatch(owner string, rs []ringEntry) {
	if owner == o.cfg.ID {
		// A claim of this replica held by a live epoch that is not ours: only a replica with
		// the same id could do that. Leave the deliveries to JetStream.
		for _, r := range rs {
			o.giveBack(r.d, o.cfg.LeaseTTL/4)
		}
		return
	}
	m := &nats.Msg{Subject: events.AgentWakeSubject(owner), Reply: o.bellSubj}
	if len(rs) == 1 {
		// One delivery keeps the single-ring form, which replicas of every version read.
		m.Header = nats.Header{events.HeaderWakeAck: []string{rs[0].d.Msg.Reply()}}
		m.Data = events.WakeBody(rs[0].sk, rs[0].d.Seq)
	} else {
		var body []byte
		for _, r := range rs {
			body = events.AppendWake(body, events.WakeEntry{Session: r.sk, Seq: r.d.Seq, Ack: r.d.Msg.Reply()})
		}
		m.Data = body
	}
	if err := o.nc.PublishMsg(m); err != nil {
		if o.ctx.Err() == nil {
			o.log.Debug("ring doorbell", "owner", owner, "deliveries", len(rs), "err", err)
		}
		for _, r := range rs {
			o.forgetOwner(r.sk.String(), owner, r.epoch) // look again when it comes back
			o.giveBack(r.d, o.cfg.LeaseTTL/4)
		}
		return
	}
	for _, r := range rs {
		o.progress.Remove(r.d.Msg) // the owner holds it now (a no-op unless it waited for a claim)
	}
}

// notOwnerNotice is what a rung replica sends back to the ringer's doorbell for the sessions it
// did not run: "claiming <its id>" and then one session token per line. (A replica of an older
// version answers a ring with a bare "claiming"; it names no session, and is ignored.)
func notOwnerNotice(self string, tokens []string) []byte {
	b := append(append([]byte(nil), noticePrefix...), self...)
	for _, t := range tokens {
		b = append(append(b, '\n'), t...)
	}
	return b
}

// isNotice reports whether a doorbell message is a notOwnerNotice: its first line is
// "claiming", alone or with an id. A ring's first line starts with a session token, and no
// session key encodes to "claiming".
func isNotice(body []byte) bool {
	first, _, _ := bytes.Cut(body, []byte{'\n'})
	return bytes.Equal(first, WakeNotOwner) || bytes.HasPrefix(first, noticePrefix)
}

// onNotice forgets the hints a notOwnerNotice says are wrong.
func (o *Manager) onNotice(body []byte) {
	first, rest, _ := bytes.Cut(body, []byte{'\n'})
	_, owner, ok := bytes.Cut(first, []byte{' '})
	if !ok || len(rest) == 0 {
		return
	}
	for tok := range bytes.SplitSeq(rest, []byte{'\n'}) {
		sk, err := events.ParseSessionKeyToken(string(tok))
		if err != nil {
			continue
		}
		o.mu.Lock()
		if h, ok := o.owners[sk.String()]; ok && h.owner == string(owner) {
			delete(o.owners, sk.String())
		}
		o.mu.Unlock()
	}
}

// forgetOwner drops the hint that owner (of epoch) runs session key, unless it says something
// else by now.
func (o *Manager) forgetOwner(key, owner string, epoch uint64) {
	o.mu.Lock()
	if h, ok := o.owners[key]; ok && h.owner == owner && h.epoch == epoch {
		delete(o.owners, key)
	}
	o.mu.Unlock()
}

// onWake answers a ring of this replica's doorbell: another replica got deliveries for
// sessions it saw this replica own. The deliveries the ring hands over (their ack subjects) are
// held here from now on; each session's actor reads the inbox up to the sequence rung. With no
// actor (it went idle, or this replica restarted) the replica claims the session, whose actor
// then reads the inbox from the cursor, and tells the ringer (a notice, or the answer to a
// request), so that it looks before it rings here for that session again.
func (o *Manager) onWake(m *nats.Msg) {
	if len(m.Data) == 0 { // a probe (probePeers): answering is all it asks
		if m.Reply != "" && o.ctx.Err() == nil {
			_ = m.Respond(nil)
		}
		return
	}
	if isNotice(m.Data) {
		o.onNotice(m.Data)
		return
	}
	single := bytes.IndexByte(m.Data, '\n') < 0
	entries, err := events.ParseWake(m.Data, m.Header.Get(events.HeaderWakeAck))
	if err != nil {
		o.log.Warn("ignoring a malformed doorbell ring", "err", err)
		return
	}
	var notOwned []string // tokens of the sessions this replica did not run
	o.mu.Lock()
	if o.ctx.Err() != nil {
		o.mu.Unlock()
		return // the deliveries come back after AckWait
	}
	for _, e := range entries {
		var d *Delivery
		if e.Ack != "" {
			d = &Delivery{Msg: &adoptedMsg{nc: o.nc, reply: e.Ack, subject: events.AgentInSubject(e.Session), seq: e.Seq}, Seq: e.Seq}
		}
		key := e.Session.String()
		if a := o.sess[key]; a != nil && a.Alive() {
			if d != nil {
				a.Deliver(d.Msg, d.Seq)
			} else {
				a.Know(e.Seq)
			}
			continue
		}
		notOwned = append(notOwned, e.Session.Token())
		waiting, ok := o.claiming[key]
		if d != nil {
			waiting = append(waiting, *d)
		}
		o.claiming[key] = waiting
		if !ok { // else the claim under way takes it, and its actor reads the inbox from the cursor
			delete(o.owners, key)
			o.wg.Add(1)
			go o.claim(e.Session)
		}
	}
	o.mu.Unlock()
	switch {
	case m.Reply == "":
	case strings.HasPrefix(m.Reply, events.PrefixAgentWake+"."):
		// A ring from a replica's bell: say something only when there is something to say.
		if len(notOwned) > 0 {
			_ = o.nc.Publish(m.Reply, notOwnerNotice(o.cfg.ID, notOwned))
		}
	case single:
		// A request (an older replica, or a tool): empty if this replica ran the session.
		var answer []byte
		if len(notOwned) > 0 {
			answer = WakeNotOwner
		}
		_ = m.Respond(answer)
	default:
		_ = m.Respond([]byte(strings.Join(notOwned, "\n")))
	}
}

// adoptedMsg is a SESSION_IN delivery that another replica handed over by a doorbell ring:
// its acks go to the delivery's ack subject from this replica's connection, as JetStream
// accepts acks from any client. It carries no payload; the actor reads the event from the log.
type adoptedMsg struct {
	nc      *nats.Conn
	reply   string
	subject string
	seq     uint64
}

var _ jetstream.Msg = (*adoptedMsg)(nil)

func (m *adoptedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, NumDelivered: 1, Stream: events.StreamSessionIn, Consumer: ConsumerName}, nil
}
func (m *adoptedMsg) Data() []byte         { return nil }
func (m *adoptedMsg) Headers() nats.Header { return nil }
func (m *adoptedMsg) Subject() string      { return m.subject }
func (m *adoptedMsg) Reply() string        { return m.reply }
func (m *adoptedMsg) Ack() error           { return m.send("+ACK") }
func (m *adoptedMsg) Nak() error           { return m.send("-NAK") }
func (m *adoptedMsg) InProgress() error    { return m.send("+WPI") }
func (m *adoptedMsg) Term() error          { return m.send("+TERM") }
func (m *adoptedMsg) TermWithReason(reason string) error {
	return m.send("+TERM " + reason)
}
func (m *adoptedMsg) NakWithDelay(delay time.Duration) error {
	return m.send(fmt.Sprintf(`-NAK {"delay": %d}`, delay.Nanoseconds()))
}
func (m *adoptedMsg) DoubleAck(ctx context.Context) error {
	_, err := m.nc.RequestWithContext(ctx, m.reply, []byte("+ACK"))
	return err
}

func (m *adoptedMsg) send(body string) error {
	if m.reply == "" {
		return jetstream.ErrMsgNoReply
	}
	return m.nc.Publish(m.reply, []byte(body))
}
