package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// MediaStore is the part of jetstream.ObjectStore (bucket "media") ingest needs: inline uploads
// are stored there and events carry media:// references, not megabytes (DESIGN §3).
type MediaStore interface {
	GetInfo(ctx context.Context, name string, opts ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error)
	Put(ctx context.Context, meta jetstream.ObjectMeta, reader io.Reader) (*jetstream.ObjectInfo, error)
}

// WithMedia makes the Ingestor store inline media (base64 in a segment, or a data: URL) in s
// and reference it as media://<name>. Without a store inline media stays in the event.
func (in *Ingestor) WithMedia(s MediaStore) *Ingestor {
	in.media = s
	return in
}

// MediaScheme prefixes references into the media object store.
const MediaScheme = "media://"

// inlineData returns the base64 payload of a media segment and its media type: data.base64,
// data.data (audio kinds) or a data: URL in data.url / data.file. ok is false when the segment
// carries no inline bytes.
func inlineData(s events.Segment) (payload, mime string, ok bool) {
	if !s.IsMedia() {
		return "", "", false
	}
	mime = s.Str("mimeType")
	if b := s.Str("base64"); b != "" {
		return b, mime, true
	}
	switch s.Type {
	case events.SegAudio, events.SegVoice, events.SegRecord:
		if b := s.Str("data"); b != "" {
			if mime == "" && s.Str("format") != "" {
				mime = "audio/" + strings.ToLower(s.Str("format"))
			}
			return b, mime, true
		}
	}
	for _, k := range []string{"url", "file"} {
		v := s.Str(k)
		rest, isData := strings.CutPrefix(v, "data:")
		if !isData {
			continue
		}
		meta, data, found := strings.Cut(rest, ",")
		if !found || !strings.HasSuffix(meta, ";base64") {
			return "", "", false // a non-base64 data: URL is left alone (and will fail validation later if useless)
		}
		if t := strings.TrimSuffix(meta, ";base64"); t != "" {
			mime = t
		}
		return data, mime, true
	}
	return "", "", false
}

// decodeBase64 accepts standard and URL-safe base64, padded or not, with line breaks.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// extensions for object names, by media type.
var extensions = map[string]string{
	"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp", "image/bmp": ".bmp",
	"audio/mpeg": ".mp3", "audio/mp3": ".mp3", "audio/wav": ".wav", "audio/x-wav": ".wav", "audio/wave": ".wav",
	"audio/ogg": ".ogg", "audio/amr": ".amr", "audio/silk": ".silk", "audio/mp4": ".m4a", "audio/aac": ".aac",
	"video/mp4": ".mp4", "video/webm": ".webm", "video/quicktime": ".mov", "application/pdf": ".pdf",
	"text/plain": ".txt", "application/zip": ".zip",
}

// storeInline moves the inline media of m into the media store, replacing each payload with
// data.url media://<name> (content-addressed: SHA-256 plus an extension, so a retried upload
// is stored once), data.mimeType and data.size. A payload that is not base64 is an invalid
// message (events.ErrInvalid) naming the segment.
func (in *Ingestor) storeInline(ctx context.Context, m *events.IMMessage) error {
	if in.media == nil {
		return nil
	}
	var content events.Segments
	for i, s := range m.Content {
		payload, mime, ok := inlineData(s)
		if !ok {
			continue
		}
		data, err := decodeBase64(payload)
		if err != nil || len(data) == 0 {
			return fmt.Errorf("%w: content[%d] (%s): inline data is not base64", events.ErrInvalid, i, s.Type)
		}
		if mime == "" || mime == "application/octet-stream" {
			mime = http.DetectContentType(data)
			if j := strings.IndexByte(mime, ';'); j > 0 {
				mime = mime[:j]
			}
		}
		sum := sha256.Sum256(data)
		ext := extensions[strings.ToLower(mime)]
		if ext == "" {
			ext = ".bin"
		}
		name := hex.EncodeToString(sum[:]) + ext
		if _, err := in.media.GetInfo(ctx, name); errors.Is(err, jetstream.ErrObjectNotFound) {
			meta := jetstream.ObjectMeta{Name: name, Description: fmt.Sprintf("%s from %s/%s message %s", s.Type, m.Platform, m.Bot, m.MessageID),
				Headers: nats.Header{"Content-Type": []string{mime}}}
			if _, err := in.media.Put(ctx, meta, bytes.NewReader(data)); err != nil {
				return fmt.Errorf("store %s of message %s: %w", s.Type, m.MessageID, err)
			}
		} else if err != nil {
			return fmt.Errorf("media store: %w", err)
		}
		if content == nil {
			content = append(events.Segments(nil), m.Content...)
		}
		d := maps.Clone(s.Data)
		delete(d, "base64")
		if s.Type == events.SegAudio || s.Type == events.SegVoice || s.Type == events.SegRecord {
			delete(d, "data")
		}
		delete(d, "file")
		d["url"], d["mimeType"], d["size"] = MediaScheme+name, mime, len(data)
		content[i] = events.Segment{Type: s.Type, Data: d}
	}
	if content != nil {
		m.Content = content
	}
	return nil
}
