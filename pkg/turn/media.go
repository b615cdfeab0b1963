package turn

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/llm"
)

// mediaText describes a non-image media segment for the model (its fields escaped: none can
// close the description's bracket, open a prefix or start a line of its own), with its reference, so that a
// voice message, a video, a sticker or a file that triggered a turn reaches the model instead of
// vanishing: "[voice message: media://ab.amr (amr, 3s)]", "[file report.pdf (12345 bytes):
// https://…]", "[face 14 微笑]". ok is false for segments that are not such media.
func mediaText(s events.Segment) (string, bool) {
	var what string
	switch s.Type {
	case events.SegAudio:
		what = "audio"
	case events.SegVoice, events.SegRecord:
		what = "voice message"
	case events.SegVideo:
		what = "video"
	case events.SegFile:
		what = "file"
		if n := s.Str("name"); n != "" {
			what += " " + identity.EscapeValue(n)
		}
	case events.SegFace, events.SegSticker, events.SegEmoji:
		id := s.Str("id")
		if id == "" {
			id = s.Str("face_id")
		}
		label := strings.TrimSpace(strings.Join(nonEmpty(s.Str("text"), s.Str("name"), s.Str("describe")), " "))
		return strings.TrimSpace(fmt.Sprintf("[%s %s %s]", identity.EscapeValue(s.Type), identity.EscapeValue(id), identity.EscapeValue(label))), true
	default:
		return "", false // text and the like, most segments: not even looked up
	}
	ref := identity.EscapeRef(s.MediaRef())
	var details []string
	if f := s.Str("format"); f != "" {
		details = append(details, identity.EscapeValue(f))
	} else if mt := s.Str("mimeType"); mt != "" {
		details = append(details, identity.EscapeValue(mt))
	}
	if n, ok := s.Data["size"].(float64); ok && n > 0 {
		details = append(details, fmt.Sprintf("%.0f bytes", n))
	} else if n, ok := s.Data["size"].(int64); ok && n > 0 {
		details = append(details, fmt.Sprintf("%d bytes", n))
	}
	if d, ok := s.Data["duration"].(float64); ok && d > 0 {
		details = append(details, fmt.Sprintf("%.0fs", d))
	}
	if c := s.Str("caption"); c != "" {
		details = append(details, "caption: "+identity.EscapeValue(c))
	}
	text := "[" + what
	if ref != "" {
		text += ": " + ref
	} else if s.Str("base64") != "" || s.Str("data") != "" {
		text += ": inline data"
	}
	if len(details) > 0 {
		text += " (" + strings.Join(details, ", ") + ")"
	}
	return text + "]", true
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// mediaParts are the content parts a message's segments add for the model: images as image
// blocks (inline data) or references (inlined later for a vision model), the other media as
// descriptive text.
func mediaParts(m *events.IMMessage) []llm.Content {
	var out []llm.Content
	for _, s := range m.Content {
		if s.Type == events.SegImage {
			if e := s.Str("error"); e != "" && !strings.HasPrefix(s.MediaRef(), mediaScheme) {
				// The adapter could not fetch it (data.error): a note, not a reference to fetch again.
				out = append(out, llm.Text(unfetchedImage(errors.New(e))))
			} else if data := s.Str("base64"); data != "" {
				mime, err := inlineImageType(data, s.Str("mimeType"))
				if err != nil {
					out = append(out, llm.Text(unfetchedImage(err)))
					continue
				}
				out = append(out, llm.Image(data, mime))
			} else if ref := s.MediaRef(); ref != "" {
				out = append(out, llm.Text(imageRefPrefix+identity.EscapeRef(ref)+"]"))
			}
			continue
		}
		if t, ok := mediaText(s); ok {
			out = append(out, llm.Text(t))
		}
	}
	return out
}

// maxModelImage caps an image read from the media store for the model.
const maxModelImage = 20 << 20

// fetchImage reads an image for a vision model: media://<name> from the media object store
// (what ingest stored from an inline upload, or generate_image made), anything else through
// Options.FetchImage.
func (w *Worker) fetchImage(ctx context.Context, url string) ([]byte, string, error) {
	if name, ok := strings.CutPrefix(url, mediaScheme); ok {
		b, stored, err := w.readMedia(ctx, name)
		if err != nil {
			return nil, "", err
		}
		mime, err := imageType(b, stored)
		return b, mime, err
	}
	if w.opts.FetchImage == nil {
		return nil, "", fmt.Errorf("fetching %s is not configured", url)
	}
	b, mime, err := w.opts.FetchImage(ctx, url)
	if err != nil {
		return nil, "", err
	}
	mime, err = imageType(b, mime)
	return b, mime, err
}

// readMedia reads one object of the media store (at most maxModelImage bytes) and the content
// type it was stored with, whatever kind of media it is.
func (w *Worker) readMedia(ctx context.Context, name string) ([]byte, string, error) {
	if w.media == nil {
		return nil, "", fmt.Errorf("no media store to read %s%s from", mediaScheme, name)
	}
	info, err := w.media.GetInfo(ctx, name)
	if err != nil {
		return nil, "", fmt.Errorf("media %s: %w", name, err)
	}
	if info.Size > maxModelImage {
		return nil, "", fmt.Errorf("media %s is %d bytes, over %d", name, info.Size, maxModelImage)
	}
	b, err := w.media.GetBytes(ctx, name)
	if err != nil {
		return nil, "", fmt.Errorf("media %s: %w", name, err)
	}
	return b, info.Headers.Get("Content-Type"), nil
}

// modelImageTypes are the image types vision providers take (OpenAI, Anthropic, Google).
var modelImageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// imageType checks that b is an image a vision model takes, by its bytes (net/http's
// DetectContentType sniffs the magic numbers), whatever the server or the store declared: an
// error page served for an image URL (a 404's text/html, a login page) must not reach the
// provider as an image, which would fail the whole request. It returns the sniffed type.
func imageType(b []byte, declared string) (string, error) {
	sniffed := http.DetectContentType(b)
	if modelImageTypes[sniffed] {
		return sniffed, nil
	}
	if len(b) == 0 {
		return "", errors.New("empty")
	}
	if declared == "" {
		declared = "unknown type"
	}
	sniffed, _, _ = strings.Cut(sniffed, ";")
	return "", fmt.Errorf("not an image (%s, declared %s)", sniffed, declared)
}

// inlineImageType checks an image a message carries inline (data.base64) by its first bytes.
func inlineImageType(data, declared string) (string, error) {
	head := data[:min(len(data), 700)] // 512 bytes to sniff, base64 is 4/3 of that
	head = head[:len(head)/4*4]
	b, err := base64.StdEncoding.DecodeString(head)
	if err != nil {
		return "", fmt.Errorf("inline image is not base64: %w", err)
	}
	return imageType(b, declared)
}

// unfetchedImage is what the model reads instead of an image that could not be fetched or is
// none ("[image could not be fetched: HTTP 404]"), so it knows one was sent and can say so,
// and the provider is not sent a broken image.
func unfetchedImage(err error) string {
	return "[image could not be fetched: " + identity.EscapeValue(err.Error()) + "]"
}

// mediaScheme is a reference into the media object store.
const mediaScheme = "media://"
