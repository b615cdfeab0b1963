package turn

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/chunk"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/output"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// turnReply is what a committed turn posts, in order, each its own message:
//
//   - the answers the model gave before a follow-up (/followup) or a steer made the loop go on:
//     the model's context holds them as said to the user, so the user must see them (issue 37:
//     only the follow-up's answer was posted);
//   - the turn's reply (replyFor), and when the model still asked for tools at the iteration
//     limit, a line that says the turn stopped there (issue 37: such a turn ended in silence).
//
// final is the last assistant message of msgs, the turn's messages. It sets t.limitSteps for
// the turn's outcome and log line. Pure over msgs, so a resume posts the same parts (same ids).
func (t *turnRun) turnReply(final *llm.Message, msgs []llm.Message) []string {
	texts := earlierAnswers(msgs)
	text := t.replyFor(final, msgs)
	if stoppedAtLimit(final, msgs) {
		t.limitSteps = modelCalls(msgs)
		t.a.log.Warn("turn stopped at the iteration limit", "turn", t.id, "model_calls", t.limitSteps,
			"model", final.Provider+"/"+final.Model)
		text = strings.TrimSpace(strings.TrimSpace(text) + "\n\n" + limitText(t.limitSteps))
	}
	return append(texts, text)
}

// limitText tells the user that the turn stopped at its limit of model calls.
func limitText(steps int) string {
	return fmt.Sprintf("⚠️ Stopped after %d steps: this turn reached its limit of model calls (ai.agent.maxIterations) "+
		"before the model finished. Send \"continue\" to let it go on from here.", steps)
}

// stoppedAtLimit reports whether the loop stopped with the model's tool calls answered but the
// model not asked again: the only way a turn ends on a tool batch other than ask_user's.
func stoppedAtLimit(final *llm.Message, msgs []llm.Message) bool {
	if final == nil || len(final.ToolCalls()) == 0 {
		return false
	}
	if s := final.StopReason; s == llm.StopReasonError || s == llm.StopReasonAborted {
		return false
	}
	_, ask := asked(msgs)
	return !ask
}

// modelCalls counts the assistant messages of msgs: one per model call.
func modelCalls(msgs []llm.Message) int {
	n := 0
	for i := range msgs {
		if msgs[i].Role == llm.RoleAssistant {
			n++
		}
	}
	return n
}

// earlierAnswers are the texts of the assistant messages of msgs that ended a run of the loop
// (no tool calls, not failed) and were followed by a user message: a follow-up or a steer the
// loop took after that answer.
func earlierAnswers(msgs []llm.Message) []string {
	var out []string
	for i := 0; i+1 < len(msgs); i++ {
		m := &msgs[i]
		if m.Role != llm.RoleAssistant || msgs[i+1].Role != llm.RoleUser || len(m.ToolCalls()) > 0 {
			continue
		}
		if m.StopReason == llm.StopReasonError || m.StopReason == llm.StopReasonAborted {
			continue
		}
		if text := strings.TrimSpace(m.TextContent()); text != "" && text != HeartbeatOK {
			out = append(out, text)
		}
	}
	return out
}

// replyPublishTimeout bounds the publication of a committed turn's record and reply.
const replyPublishTimeout = 30 * time.Second

// replyContext is the context a committed turn's record and reply are published on: not the
// actor's, which ends when the actor stops, but one that only Kill (a simulated crash) or
// replyPublishTimeout ends.
func (w *Worker) replyContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.killCtx, replyPublishTimeout)
}

// publishReply sends the final assistant text as outbound parts (ids turn-0, turn-1, ...; a
// resumed turn republishes under the same ids and JetStream drops the duplicates).
func (t *turnRun) replyText(final *llm.Message) string {
	text := ""
	switch {
	case final == nil:
		text = "⚠️ The turn ended without a reply."
	case final.StopReason == llm.StopReasonError && strings.HasPrefix(final.ErrorMessage, overflowReply):
		text = overflowText(t.msg.Sender, final.ErrorMessage) // compact.go
	case final.StopReason == llm.StopReasonError && strings.HasPrefix(final.ErrorMessage, rateLimitReply):
		text = "⏳ " + final.ErrorMessage // ratelimit.go: the user learns when to come back
	case final.StopReason == llm.StopReasonError:
		text = failureText(t.msg.Sender, "The model failed", final.ErrorMessage)
	case final.StopReason == llm.StopReasonAborted:
		t.mu.Lock()
		reason := t.reason
		t.mu.Unlock()
		if reason == "" {
			reason = "aborted"
		}
		text = strings.TrimSpace(final.TextContent() + "\n\n(" + reason + ")")
	default:
		text = final.TextContent()
		if t.heartbeat && strings.TrimSpace(text) == HeartbeatOK {
			text = ""
		}
	}
	return text
}

// replyLimit is the part size for platforms without a known limit.
const replyLimit = 4000

// replyMsgs are the outbound parts of text (ids turn-0, turn-1, ...), for the pending turn's
// reply target; fresh promises egress that they were never published before.
func (rp replier) replyMsgs(pt *pendingTurn, turn, text string, fresh bool) []*nats.Msg {
	a := rp.a
	return a.out.replyMsgsOf(pt, turn, []string{text}, fresh)
}

// replyMsgsOf is replyMsgs of several texts, each its own message(s), in order (replies.go).
func (rp replier) replyMsgsOf(pt *pendingTurn, turn string, texts []string, fresh bool) []*nats.Msg {
	a := rp.a
	var segs []events.Segments
	for _, text := range texts {
		for _, el := range output.Parse(text) { // media and cards: a part each
			t, ok := el.(output.TextElement)
			if !ok {
				segs = append(segs, events.Segments{output.Segment(el)})
				continue
			}
			for _, c := range chunk.Chunk(t.Text, replyLimit) {
				segs = append(segs, events.Segments{events.TextSeg(c)})
			}
		}
	}
	msgs := make([]*nats.Msg, 0, len(segs))
	for i, content := range segs {
		out := events.Outbound{
			OutID: events.OutID(turn, i), Turn: turn, Part: i, Platform: a.sk.Platform, Bot: a.sk.Bot,
			Scene: events.Scene{Type: a.sk.Scope, ID: a.sk.Scene}, ReplyTo: pt.msg.MessageID, Content: content, Fresh: fresh,
			Final: i == len(segs)-1,
		}
		ev := events.New(out, events.WithSession(a.sk.String()), events.WithTurn(turn), events.WithTrace(pt.trace), events.WithID(out.OutID))
		m, err := events.NewMsg(events.IMOutSubject(a.sk), ev)
		if err != nil {
			// Our own event failed validation: a bug, but the user still gets told.
			a.log.Error("reply part not publishable", "turn", turn, "part", i, "err", err)
			continue
		}
		tracing.InjectSpanContext(pt.spanCtx, m.Header)
		msgs = append(msgs, m)
	}
	return msgs
}

// publishReply publishes a committed turn's reply, then its turn_committed record (rec; nil:
// none). The record waits for the reply's acks, so a new owner that finds the record knows the
// reply is stored too: a kill between the two leaves the record missing, and the turn is
// finished from its commit (takeOver), which publishes both again under the same ids. The
// reply's last part likewise waits for the acks of the parts before it, so that part stored
// (last on the chat's IM_OUT subject, or its receipt on IM_SENT) means every part was stored
// (actor.replyStored, for closing commits).
func (w *Worker) publishReply(ctx context.Context, rec *nats.Msg, reply []*nats.Msg) error {
	if n := len(reply); n > 1 {
		if err := w.publishAll(ctx, reply[:n-1]); err != nil {
			return err
		}
		reply = reply[n-1:]
	}
	if err := w.publishAll(ctx, reply); err != nil {
		return err
	}
	if rec == nil {
		return nil
	}
	return w.publishAll(ctx, []*nats.Msg{rec})
}

// publishAll stores msgs, pipelined, and retries the ones that fail with backoff until they
// are stored or ctx ends. Every message must carry a Nats-Msg-Id, so a retry of one that was
// stored after all is dropped as a duplicate.
func (w *Worker) publishAll(ctx context.Context, msgs []*nats.Msg) error {
	var b *backoff.ExponentialBackOff // made on the first failure: nearly every call has none
	for {
		futures := make([]jetstream.PubAckFuture, len(msgs))
		var failed []*nats.Msg
		var lastErr error
		for i, m := range msgs {
			if futures[i], lastErr = w.js.PublishMsgAsync(m); lastErr != nil {
				failed = append(failed, m)
			}
		}
		until := time.Now().Add(ackWait)
		for i, f := range futures {
			if f == nil {
				continue
			}
			if err := natsutil.AwaitAck(ctx, f, until); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				lastErr = err
				failed = append(failed, msgs[i]) // published again under the same msg id
			}
		}
		if len(failed) == 0 {
			return nil
		}
		if b == nil {
			b = publishBackoff()
		}
		d := b.NextBackOff()
		w.log.Warn("publish failed; retrying", "messages", len(failed), "in", d, "err", lastErr)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return fmt.Errorf("publish %d messages: %w (last error: %w)", len(failed), ctx.Err(), lastErr)
		}
		msgs = failed
	}
}

// publishBackoff is publishAll's retry schedule: 50 ms first, doubling up to 5 s, forever.
// The options, not the fields: the constructor's Reset takes the first interval from them
// (fields set afterwards left the first retry at the default 500 ms).
func publishBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
}

func (rp replier) pendingFrom(seq uint64, m llm.Message, im *events.IMMessage, sender events.Sender, trace string) *pendingTurn {
	a := rp.a
	target := a.out.syntheticTarget(sender, "")
	if im != nil {
		target = *im
	}
	return &pendingTurn{seq: seq, input: []llm.Message{m}, msg: target, trace: trace, parent: a.parent}
}

// syntheticTarget is a reply target for events that did not come from a chat message.
func (rp replier) syntheticTarget(sender events.Sender, replyTo string) events.IMMessage {
	a := rp.a
	return events.IMMessage{Platform: a.sk.Platform, Bot: a.sk.Bot, MessageID: replyTo,
		Scene: events.Scene{Type: a.sk.Scope, ID: a.sk.Scene}, Sender: sender}
}

// replyText publishes text as outbound parts to the pending turn's reply target. It gives up
// only when the actor stops (a resumed turn publishes its reply again).
func (rp replier) replyText(pt *pendingTurn, turn, text string) {
	a := rp.a
	if err := a.w.publishAll(a.ctx, a.out.replyMsgs(pt, turn, text, false)); err != nil {
		a.log.Error("publish reply", "turn", turn, "err", err)
	}
}

// replier builds a session's turns and replies: the pending turn of an inbox event, the user
// input, and the outbound parts of a reply (IM_OUT).
type replier struct{ a *actor }
