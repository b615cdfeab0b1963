package im

import (
	"context"
	"strings"

	"github.com/agentbus/agentbus/pkg/chunk"
	"github.com/agentbus/agentbus/pkg/events"
)

// Sink takes one normalized inbound message: the ingest role's Ingestor behind a small
// adapter in pkg/app. Ingest is safe to call again with the same message (the platform
// message id is the dedupe id), so an adapter retries a failed call or, for a platform that
// redelivers (Telegram's update offset), leaves the redelivery to the platform. An error
// matching events.ErrInvalid is a message that can never be ingested: log it and move on.
type Sink interface {
	Ingest(ctx context.Context, m *events.IMMessage) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, m *events.IMMessage) error

// Ingest calls f.
func (f SinkFunc) Ingest(ctx context.Context, m *events.IMMessage) error { return f(ctx, m) }

// Chunks cuts an outbound part's content into the messages a platform with a limit of limit
// characters per message takes: text runs are cut with pkg/chunk (paragraphs, sentences,
// code fences kept renderable); every other segment (image, at, reply, ...) stays in the
// message of the text it follows. limit <= 0 means no limit.
func Chunks(content events.Segments, limit int) []events.Segments {
	if limit <= 0 || textLen(content) <= limit {
		return []events.Segments{content}
	}
	var out []events.Segments
	var cur events.Segments
	curLen := 0
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
		}
		cur, curLen = nil, 0
	}
	for _, s := range content {
		if s.Type != events.SegText {
			cur = append(cur, s)
			continue
		}
		text := s.Str("text")
		n := len([]rune(text))
		if curLen+n <= limit {
			cur = append(cur, s)
			curLen += n
			continue
		}
		for _, piece := range chunk.Chunk(text, limit) {
			if curLen > 0 && curLen+len([]rune(piece)) > limit {
				flush()
			}
			cur = append(cur, events.TextSeg(piece))
			curLen += len([]rune(piece))
		}
	}
	flush()
	return out
}

func textLen(content events.Segments) int {
	n := 0
	for _, s := range content {
		if s.Type == events.SegText {
			n += len([]rune(s.Str("text")))
		}
	}
	return n
}

// RPCSubject is the core NATS subject on which the ingest replica that holds a bot's
// connection answers API calls from egress: im.rpc.<platform>.<bot>. Only the holder
// subscribes, so a request that nobody answers (nats.ErrNoResponders) means no replica
// holds the connection right now.
func RPCSubject(platform, bot string) string {
	return "im.rpc." + events.EncodeToken(platform) + "." + events.EncodeToken(bot)
}

// MediaName is the media object name of the i-th attachment of an inbound message:
// "in/<platform>/<bot>/<message id>/<i>", made safe for object names.
func MediaName(platform, bot, messageID string, i int) string {
	r := strings.NewReplacer(" ", "_", "\\", "_")
	return r.Replace("in/" + platform + "/" + bot + "/" + messageID + "/" + itoa(i))
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	neg := i < 0
	if neg {
		i = -i
	}
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	if neg {
		n--
		b[n] = '-'
	}
	return string(b[n:])
}
