package natsutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MsgQuery names one stored message: the first at or after Seq on subject NextFor, the last on
// subject LastFor, or (both empty) exactly Seq.
type MsgQuery struct {
	Seq     uint64
	NextFor string
	LastFor string
}

// GetMsg reads a message for a decision that must see every acknowledged write (the inbox event
// at a session's cursor, "has this tool call a result yet?", a session record).
//
// It exists next to jetstream.Stream.GetMsg because on a stream with AllowDirect that method
// asks any replica, and a replica that lags behind the leader answers "not found" for a message
// the leader has already acknowledged. A replica holds a prefix of the stream, so a message it
// does return is the right one; only its "not found" is unreliable. GetMsg therefore tries the
// direct get first (cheap, spread over replicas) and confirms a "not found" with the stream
// leader (LeaderGetMsg). It returns jetstream.ErrMsgNotFound only when the leader says so.
//
// On a stream with one replica the direct get is the leader's answer already (see
// ConsistentGetMsg), and its "not found" is final.
func GetMsg(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, q MsgQuery) (*jetstream.RawStreamMsg, error) {
	raw, err := plainGetMsg(ctx, s, q)
	if err == nil || !errors.Is(err, jetstream.ErrMsgNotFound) {
		return raw, err
	}
	info := s.CachedInfo()
	if info == nil || !info.Config.AllowDirect || info.Config.Replicas <= 1 {
		return nil, err // that already was the leader's answer
	}
	return LeaderGetMsg(ctx, js, info.Config.Name, q)
}

// plainGetMsg is the stream handle's own get: a direct get when the stream allows them.
func plainGetMsg(ctx context.Context, s jetstream.Stream, q MsgQuery) (*jetstream.RawStreamMsg, error) {
	switch {
	case q.LastFor != "":
		return s.GetLastMsgForSubject(ctx, q.LastFor)
	case q.NextFor != "":
		return s.GetMsg(ctx, q.Seq, jetstream.WithGetMsgSubject(q.NextFor))
	}
	return s.GetMsg(ctx, q.Seq)
}

// ConsistentGetMsg is LeaderGetMsg for a caller that holds the stream's handle: the answer
// reflects every write the stream has acknowledged, found or not.
//
// On a stream with one replica (the embedded server, a single nats-server, any R1 stream of a
// cluster) the one server that stores the stream is its leader, so a direct get gives the same
// answer for much less: the server answers it in the client's read loop, while a JetStream API
// request (STREAM.MSG.GET) waits in the server's API queue, is served by one of GOMAXPROCS
// API goroutines and returns the message base64-encoded in JSON. A session's cold start makes
// several of these reads, so on a busy server the queue was where its time went.
//
// Caveats: the replica count is the one of s's cached info (as last read, normally when the
// handle was opened), so a stream scaled up to more replicas while the process runs is read
// the direct way until the handle is opened again; and a direct get can also be answered by a
// mirror created with MirrorDirect, which agentbus never provisions for its streams.
func ConsistentGetMsg(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, q MsgQuery) (*jetstream.RawStreamMsg, error) {
	info := s.CachedInfo()
	if info != nil && info.Config.Replicas <= 1 {
		return plainGetMsg(ctx, s, q)
	}
	name := ""
	if info != nil {
		name = info.Config.Name
	}
	return LeaderGetMsg(ctx, js, name, q)
}

// leaderGetRequest and leaderGetResponse are the JetStream API's STREAM.MSG.GET request and
// reply (the non-direct get, answered by the stream leader).
type leaderGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

type leaderGetResponse struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	Msg   *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// LeaderGetMsg asks the leader of stream for the message q names, never a replica: the
// answer reflects every write the stream has acknowledged. It returns jetstream.ErrMsgNotFound
// when there is no such message. ctx bounds the request (without a deadline, the JetStream
// context's default timeout applies); within it, a request left unanswered for
// leaderGetAttempt is sent again.
func LeaderGetMsg(ctx context.Context, js jetstream.JetStream, stream string, q MsgQuery) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		timeout := js.Options().DefaultTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := json.Marshal(leaderGetRequest(q))
	if err != nil {
		return nil, err
	}
	subj := apiPrefix(js) + "STREAM.MSG.GET." + stream
	var resp *nats.Msg
	for {
		actx, cancel := context.WithTimeout(ctx, leaderGetAttempt)
		resp, err = js.Conn().RequestWithContext(actx, subj, req)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("get from %s leader: %w", stream, err)
	}
	var r leaderGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("get from %s leader: decode reply: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, fmt.Errorf("get from %s leader: %w", stream, r.Error)
	}
	if r.Msg == nil {
		return nil, fmt.Errorf("get from %s leader: %w", stream, jetstream.ErrInvalidJetStreamResponse)
	}
	var hdr nats.Header
	if len(r.Msg.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(r.Msg.Header); err != nil {
			return nil, fmt.Errorf("get from %s leader: decode headers: %w", stream, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: r.Msg.Subject, Sequence: r.Msg.Sequence, Header: hdr, Data: r.Msg.Data, Time: r.Msg.Time}, nil
}

// leaderGetAttempt bounds one STREAM.MSG.GET request of LeaderGetMsg. While a stream has no
// leader (a NATS node died and its raft group elects another, 4-9 s) the request is not
// refused but left unanswered, so one request that waited for the caller's whole deadline
// learned of the new leader only then: turns in flight at a node's kill waited up to 9 s more
// than the election. Asked again every leaderGetAttempt, the read is answered within that
// long of the new leader. A leader that takes longer to answer is asked again, which costs it
// a repeated read and no harm.
const leaderGetAttempt = 2 * time.Second

// apiPrefix is the JetStream API prefix js sends requests with.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		p := o.APIPrefix
		if p[len(p)-1] != '.' {
			p += "."
		}
		return p
	}
	return jetstream.DefaultAPIPrefix
}
