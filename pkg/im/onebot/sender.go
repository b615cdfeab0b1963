package onebot

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// DefaultChunkLimit is the characters per QQ message when chunkLimit is not set (QQ takes
// about 4,500; the margin leaves room for the quote and mentions).
const DefaultChunkLimit = 3000

// Sender is the egress half of the OneBot adapter: egress's Sender contract for platform
// "onebot". Parts are sent with send_msg; in ws and ws-reverse modes the call is relayed to
// the ingest replica holding the bot's connection (im.RPCSubject), in http mode it is POSTed
// to apiBase/send_msg.
//
// A part longer than the bot's chunk limit goes out as several QQ messages; the first quotes
// the message the part answers (a reply segment). The platform id returned is the first
// message's. Every message sent is recorded in the ledger (im.Ledger), so a retry of a part
// that failed half-way, on any egress replica, resumes after the messages already sent.
type Sender struct {
	bots   map[string]botOut
	media  *im.Media
	ledger *im.Ledger
}

type botOut struct {
	cfg   config.OneBotBot
	api   caller
	limit int
}

// NewSender returns the sender for bots. nc relays WebSocket-mode calls; client makes
// http-mode calls (nil: a 20 s client); media resolves media:// references (nil: such
// images are sent as their reference and fail); ledger records sent messages (nil: none).
func NewSender(bots []config.OneBotBot, nc *nats.Conn, client *http.Client, media *im.Media, ledger *im.Ledger) (*Sender, error) {
	if client == nil {
		client = &http.Client{Timeout: 20 * time.Second}
	}
	s := &Sender{bots: map[string]botOut{}, media: media, ledger: ledger}
	for _, b := range bots {
		if err := Validate(b); err != nil {
			return nil, err
		}
		bo := botOut{cfg: b, limit: b.ChunkLimit}
		if bo.limit <= 0 {
			bo.limit = DefaultChunkLimit
		}
		if mode(b) == ModeHTTP {
			bo.api = &httpAPI{base: b.APIBase, token: b.AccessToken, client: client}
		} else {
			if nc == nil {
				return nil, fmt.Errorf("onebot: bot %s: mode %s needs a NATS connection for the relay", b.ID, mode(b))
			}
			bo.api = &rpcCaller{nc: nc, bot: b.ID}
		}
		s.bots[b.ID] = bo
	}
	return s, nil
}

// Send implements egress's Sender.
func (s *Sender) Send(ctx context.Context, out events.Outbound) (string, error) {
	bo, ok := s.bots[out.Bot]
	if !ok {
		return "", im.Permanent(fmt.Errorf("%w: onebot bot %q is not configured", im.ErrUnknownBot, out.Bot))
	}
	chunks := im.Chunks(out.Content, bo.limit)
	first := ""
	for i, c := range chunks {
		key := im.ChunkKey(out.OutID, i)
		if id, ok := s.ledger.Sent(ctx, key); ok {
			if i == 0 {
				first = id
			}
			continue
		}
		msg, err := s.outSegments(ctx, c)
		if err != nil {
			return "", err
		}
		if i == 0 && out.ReplyTo != "" {
			msg = append([]segment{{Type: "reply", Data: map[string]any{"id": out.ReplyTo}}}, msg...)
		}
		params := map[string]any{"message": msg}
		switch out.Scene.Type {
		case "group":
			params["message_type"], params["group_id"] = "group", idValue(out.Scene.ID)
		case "private":
			params["message_type"], params["user_id"] = "private", idValue(out.Scene.ID)
		default:
			return "", im.Permanent(fmt.Errorf("onebot: scene type %q is not supported (group or private)", out.Scene.Type))
		}
		data, err := bo.api.call(ctx, "send_msg", params, key)
		if err != nil {
			return "", err
		}
		id := messageID(data)
		if id == "" {
			id = out.OutID + "/" + strconv.Itoa(i)
		}
		if err := s.ledger.Record(ctx, key, id); err != nil && i < len(chunks)-1 {
			return "", err // without the record a retry would send this message again
		}
		if i == 0 {
			first = id
		}
	}
	if first == "" {
		return out.OutID, nil
	}
	return first, nil
}

// idValue sends numeric ids as numbers (what every implementation expects) and anything else
// as the string it is.
func idValue(id string) any {
	if n, err := strconv.ParseInt(id, 10, 64); err == nil {
		return n
	}
	return id
}

// outSegments maps bus segments to OneBot segments: at -> at{qq}, media with a media://
// reference -> file=base64://..., other URLs passed as file=<url> for the implementation to
// download.
func (s *Sender) outSegments(ctx context.Context, content events.Segments) ([]segment, error) {
	var out []segment
	for _, seg := range content {
		switch seg.Type {
		case events.SegText:
			out = append(out, segment{Type: "text", Data: map[string]any{"text": seg.Str("text")}})
		case events.SegAt:
			out = append(out, segment{Type: "at", Data: map[string]any{"qq": seg.MentionID()}})
		case events.SegReply:
			out = append(out, segment{Type: "reply", Data: map[string]any{"id": seg.ReplyID()}})
		case events.SegFace, events.SegSticker, events.SegEmoji:
			id := seg.Str("id")
			if id == "" {
				id = seg.Str("face_id")
			}
			out = append(out, segment{Type: "face", Data: map[string]any{"id": id}})
		case events.SegImage, events.SegRecord, events.SegAudio, events.SegVoice, events.SegVideo, events.SegFile:
			typ := seg.Type
			switch typ {
			case events.SegAudio, events.SegVoice:
				typ = "record"
			}
			file, err := s.mediaFile(ctx, seg)
			if err != nil {
				return nil, im.Permanent(fmt.Errorf("onebot: %s segment: %w", seg.Type, err))
			}
			d := map[string]any{"file": file}
			if n := seg.Str("name"); n != "" {
				d["name"] = n
			}
			out = append(out, segment{Type: typ, Data: d})
		case events.SegCard:
			// QQ has no buttons a OneBot bot can send: the card as plain text (title, text,
			// "name: value" per field, "[label] url" / "[label]" per button).
			c, _ := seg.Card()
			out = append(out, segment{Type: "text", Data: map[string]any{"text": c.PlainText()}})
		default:
			// Unknown segments: their text, if any, so nothing the model wrote is lost.
			if t := seg.Str("text"); t != "" {
				out = append(out, segment{Type: "text", Data: map[string]any{"text": t}})
			}
		}
	}
	return out, nil
}

// mediaFile is the file value of a media segment.
func (s *Sender) mediaFile(ctx context.Context, seg events.Segment) (string, error) {
	if b := seg.Str("base64"); b != "" {
		return "base64://" + b, nil
	}
	ref := seg.MediaRef()
	if obj := seg.Str("object"); obj != "" && !strings.HasPrefix(ref, im.MediaScheme) {
		ref = im.MediaScheme + obj
	}
	if strings.HasPrefix(ref, im.MediaScheme) {
		b, _, _, err := s.media.Load(ctx, ref)
		if err != nil {
			return "", err
		}
		return "base64://" + base64.StdEncoding.EncodeToString(b), nil
	}
	if ref == "" {
		return "", fmt.Errorf("no url, file or object")
	}
	return ref, nil
}
