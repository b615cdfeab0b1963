package egress

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/natsutil"
)

// laneSubscriber is the watermill message.Subscriber egress's router reads IM_OUT from. It
// consumes a durable JetStream pull consumer (bound by name: it creates no stream and no
// consumer) and keeps each scene's parts in order:
//
// Messages arrive in stream order on one goroutine and are spread over `lanes` lanes by a hash
// of their subject (im.out.<platform>.<bot>.<scope>.<scene>); a lane hands one message at a
// time to the router and waits for the handler's verdict before the next, so the parts of one
// scene are sent one after the other, in the order they were published, while different
// scenes go out in parallel. (watermill-nats' pkg/nats subscriber hands messages of one queue
// group to its subscriptions at random, so two parts of a reply could overtake each other.)
//
// A message is acked only after the handler returned nil (a plain ack: the part is recorded in
// IM_SENT (its receipt) by then, so a lost ack costs a redelivery that is skipped, not a second send);
// NAKed with redeliveryDelay after an error; and left unacked when the subscriber closes
// before a verdict, so JetStream redelivers it after AckWait.
//
// A part NAKed after its in-process retries comes back after a delay, and the scene's later
// parts may go first. Order holds within one process. Replicas share the consumer, so two parts of one scene that
// are in flight at the same moment can reach two replicas and overtake each other; per-scene
// order across replicas would need partitioned consumers (not done yet).
type laneSubscriber struct {
	cons         jetstream.Consumer
	lanes        int
	laneBuf      int
	pullMax      int
	delay        redeliveryDelay
	closeTimeout time.Duration
	// progress sends the in-progress acks of every part from its fetch to its verdict (nil:
	// none), so a short AckWait only matters when this process is gone.
	progress *natsutil.InProgress
	log      *slog.Logger
	onErr    func(error) // every error the consume reports (egress.markConsumerLost)

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Metadata keys the subscriber adds next to the NATS headers (copied as they are: Nats-Msg-Id
// and the Agentbus-* correlation headers included).
const (
	MetaSubject   = "_nats_subject"
	MetaStream    = "_nats_stream"
	MetaStreamSeq = "_nats_stream_seq"
	MetaDelivered = "_nats_num_delivered"
)

type jsMsgKey struct{}

// jsMsgFrom returns the JetStream message behind a watermill message (nil if none).
func jsMsgFrom(ctx context.Context) jetstream.Msg {
	m, _ := ctx.Value(jsMsgKey{}).(jetstream.Msg)
	return m
}

// toMessage turns a JetStream message into a watermill message that keeps everything: the
// payload untouched (decoding and validation happen in the handler, so a malformed event is
// dead-lettered rather than lost in the subscriber), every header as metadata, the delivery's
// subject, stream, sequence and delivery count, and the JetStream message itself in the
// context (for in-progress acks and dead-letter records). Each delivery gets a fresh UUID:
// events other publishers write carry no watermill UUID.
func toMessage(ctx context.Context, m jetstream.Msg) *message.Message {
	wm := message.NewMessage(nuid.Next(), m.Data())
	for k, v := range m.Headers() {
		if len(v) > 0 {
			wm.Metadata.Set(k, v[0])
		}
	}
	wm.Metadata.Set(MetaSubject, m.Subject())
	if md, err := m.Metadata(); err == nil {
		wm.Metadata.Set(MetaStream, md.Stream)
		wm.Metadata.Set(MetaStreamSeq, strconv.FormatUint(md.Sequence.Stream, 10))
		wm.Metadata.Set(MetaDelivered, strconv.FormatUint(md.NumDelivered, 10))
	}
	wm.SetContext(context.WithValue(ctx, jsMsgKey{}, m))
	return wm
}

// Subscribe starts consuming; topic is informational (the consumer's filter decides).
func (s *laneSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	lanes := make([]chan jetstream.Msg, s.lanes)
	for i := range lanes {
		lanes[i] = make(chan jetstream.Msg, s.laneBuf)
	}
	cc, err := s.cons.Consume(func(m jetstream.Msg) {
		s.hold(m)
		select {
		case lanes[fnv32a(m.Subject())%uint32(len(lanes))] <- m:
		case <-s.closing:
			s.drop(m)
		case <-ctx.Done():
			s.drop(m)
		}
	}, natsutil.FailoverConsume(jetstream.PullMaxMessages(s.pullMax), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		s.log.Debug("egress: consume", "err", err)
		if s.onErr != nil {
			s.onErr(err)
		}
	}))...) // a pull request lost with a NATS node is sent again in 2 s, not 30
	if err != nil {
		return nil, err
	}
	var lanesWG sync.WaitGroup
	for _, lane := range lanes {
		lanesWG.Add(1)
		go func() {
			defer lanesWG.Done()
			s.runLane(ctx, lane, out)
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-s.closing:
		case <-ctx.Done():
		}
		cc.Stop()
		lanesWG.Wait()
		close(out)
	}()
	return out, nil
}

// fnv32a is FNV-1a of s (hash/fnv without the allocations), to pick a subject's lane.
func fnv32a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func (s *laneSubscriber) stopped(ctx context.Context) <-chan struct{} {
	select {
	case <-s.closing:
		return s.closing
	default:
	}
	return ctx.Done()
}

// hold registers a fetched part for in-progress acks; drop ends that (the part is left to
// redelivery, or its verdict was sent).
func (s *laneSubscriber) hold(m jetstream.Msg) {
	if s.progress != nil {
		s.progress.Add(m)
	}
}

func (s *laneSubscriber) drop(m jetstream.Msg) {
	if s.progress != nil {
		s.progress.Remove(m)
	}
}

func (s *laneSubscriber) runLane(ctx context.Context, lane <-chan jetstream.Msg, out chan<- *message.Message) {
	defer func() { // parts still buffered are left to redelivery
		for {
			select {
			case m := <-lane:
				s.drop(m)
			default:
				return
			}
		}
	}()
	for {
		var m jetstream.Msg
		select {
		case m = <-lane:
		case <-s.closing:
			return
		case <-ctx.Done():
			return
		}
		wm := toMessage(ctx, m)
		select {
		case out <- wm:
		case <-s.closing:
			s.drop(m)
			return // never handed over: left to redelivery
		case <-ctx.Done():
			s.drop(m)
			return
		}
		ok := s.settle(ctx, m, wm)
		s.drop(m)
		if !ok {
			return
		}
	}
}

// settle waits for the handler's verdict and passes it on to JetStream. When the subscriber
// is closing it still waits up to closeTimeout, so parts that were being sent are acked
// rather than redelivered. It reports whether the lane should go on.
func (s *laneSubscriber) settle(ctx context.Context, m jetstream.Msg, wm *message.Message) bool {
	var giveUp <-chan time.Time
	stop := s.stopped(ctx)
	for {
		select {
		case <-wm.Acked():
			// A plain ack, not a confirmed one: by now the part is recorded by its IM_SENT receipt,
			// so an ack that gets lost only means a redelivery that is skipped, and waiting
			// for the server's confirmation would cost a round trip per part.
			if err := m.Ack(); err != nil {
				s.log.Warn("egress: ack failed; the part will be redelivered and skipped", "subject", m.Subject(), "err", err)
			}
			return giveUp == nil
		case <-wm.Nacked():
			var n uint64 = 1
			if md, err := m.Metadata(); err == nil {
				n = md.NumDelivered
			}
			if err := m.NakWithDelay(s.delay.WaitTime(n)); err != nil {
				s.log.Warn("egress: nak failed; the part will be redelivered after AckWait", "subject", m.Subject(), "err", err)
			}
			return giveUp == nil
		case <-stop:
			stop = nil
			t := time.NewTimer(s.closeTimeout)
			defer t.Stop()
			giveUp = t.C
		case <-giveUp:
			return false
		}
	}
}

// Close stops consuming. Messages in the lanes that were not handed to the router are left to
// redelivery; it waits for the consume loop to end.
func (s *laneSubscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.wg.Wait()
	return nil
}
