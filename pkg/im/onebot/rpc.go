package onebot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/im"
)

// The RPC relay: egress cannot reach a WebSocket that an ingest replica holds, so it sends
// its API calls as core NATS requests on im.RPCSubject(onebot, bot), and the holder makes
// the call on its connection and answers:
//
//	request:  {"action":"send_msg","params":{...}}
//	answer:   {"data":{...}}  or  {"error":{"code":1400,"msg":"...","permanent":true}}
type rpcRequest struct {
	Action string          `json:"action"`
	Params json.RawMessage `json:"params"`
	// Idem is the ledger key of the call (im.ChunkKey): the holder answers a key it has
	// recorded from the ledger instead of calling again, and records a successful call's
	// message id before answering.
	Idem string `json:"idem,omitempty"`
}

type rpcAnswer struct {
	Data  json.RawMessage `json:"data,omitempty"`
	Error *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code         int    `json:"code,omitempty"`
	Msg          string `json:"msg"`
	Permanent    bool   `json:"permanent,omitempty"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
}

// rpcTimeout bounds one relayed call on the holder's side.
const rpcTimeout = 20 * time.Second

// serveRPC answers relayed calls on w until the subscription is removed.
func (in *Inbound) serveRPC(w *wsConn) (*nats.Subscription, error) {
	if in.o.NC == nil {
		return nil, errors.New("onebot: InboundOptions.NC is required for WebSocket modes")
	}
	sub, err := in.o.NC.QueueSubscribe(im.RPCSubject(Platform, in.o.Bot.ID), rpcQueue, func(msg *nats.Msg) {
		var req rpcRequest
		var ans rpcAnswer
		if err := json.Unmarshal(msg.Data, &req); err != nil || req.Action == "" {
			ans.Error = &rpcError{Msg: "bad relay request", Permanent: true}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			data, err := in.relayCall(ctx, w, req)
			cancel()
			if err != nil {
				ans.Error = &rpcError{Msg: err.Error(), Permanent: im.IsPermanent(err)}
				var e *im.Error
				if errors.As(err, &e) {
					ans.Error.Code, ans.Error.Msg = e.Code, e.Msg
					ans.Error.RetryAfterMs = e.RetryAfter.Milliseconds()
				}
			} else {
				ans.Data = data
			}
		}
		b, _ := json.Marshal(ans)
		_ = msg.Respond(b)
	})
	if err != nil {
		return nil, fmt.Errorf("onebot: subscribe relay: %w", err)
	}
	return sub, nil
}

// relayCall makes a relayed call on w, consulting and filling the ledger for idempotent ones.
func (in *Inbound) relayCall(ctx context.Context, w *wsConn, req rpcRequest) (json.RawMessage, error) {
	if id, ok := in.o.Ledger.Sent(ctx, req.Idem); ok {
		return json.Marshal(map[string]any{"message_id": json.Number(id)})
	}
	data, err := w.call(ctx, req.Action, req.Params)
	if err == nil && req.Idem != "" {
		if id := messageID(data); id != "" {
			if err := in.o.Ledger.Record(ctx, req.Idem, id); err != nil {
				in.log.Warn("onebot: record sent chunk", "err", err)
			}
		}
	}
	return data, err
}

// messageID reads data.message_id of a send answer ("" when absent).
func messageID(data json.RawMessage) string {
	var ack struct {
		MessageID json.Number `json:"message_id"`
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	_ = d.Decode(&ack)
	return ack.MessageID.String()
}

// rpcCaller relays calls to the connection holder.
type rpcCaller struct {
	nc  *nats.Conn
	bot string
}

func (r *rpcCaller) call(ctx context.Context, action string, params any, idem string) (json.RawMessage, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, im.Permanent(fmt.Errorf("onebot %s: encode: %w", action, err))
	}
	b, _ := json.Marshal(rpcRequest{Action: action, Params: p, Idem: idem})
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rpcTimeout+5*time.Second)
		defer cancel()
	}
	msg, err := r.nc.RequestWithContext(ctx, im.RPCSubject(Platform, r.bot), b)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("onebot bot %s: %s: %w", r.bot, action, im.ErrNotHeld)
	}
	if err != nil {
		return nil, fmt.Errorf("onebot bot %s: %s: relay: %w", r.bot, action, err)
	}
	var ans rpcAnswer
	if err := json.Unmarshal(msg.Data, &ans); err != nil {
		return nil, fmt.Errorf("onebot bot %s: %s: bad relay answer: %w", r.bot, action, err)
	}
	if ans.Error != nil {
		return nil, &im.Error{Platform: Platform, Action: action, Code: ans.Error.Code, Msg: ans.Error.Msg,
			Perm: ans.Error.Permanent, RetryAfter: time.Duration(ans.Error.RetryAfterMs) * time.Millisecond}
	}
	return ans.Data, nil
}
