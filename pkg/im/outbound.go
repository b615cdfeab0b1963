package im

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
)

// Planned is one platform message of an outbound part: a text, or one media segment.
type Planned struct {
	Text  string
	Media events.Segment
}

// Render says what one segment of a chunk becomes in a platform message: text to append to
// the chunk's text message, or media (a message of its own); neither drops it.
type Render func(s events.Segment) (text string, media bool)

// RenderText is the Render of platforms that take text, user mentions already flattened
// into text, and media other than QQ faces, emoji and stickers. A card is its plain text
// (events.Card.PlainText) on lines of its own: platforms that render cards natively
// intercept card segments before this.
func RenderText(s events.Segment) (string, bool) {
	switch {
	case s.Type == events.SegText:
		return s.Str("text"), false
	case s.Type == events.SegCard:
		c, _ := s.Card()
		return "\n" + c.PlainText() + "\n", false
	case s.IsMedia() && s.Type != events.SegFace && s.Type != events.SegEmoji && s.Type != events.SegSticker:
		return "", true
	}
	return "", false
}

// Plan turns the chunks of a part (Chunks) into platform messages: per chunk its text, trimmed
// and passed through finish when set (the platform's escaping), as one message, then one
// message per media segment, in order.
func Plan(chunks []events.Segments, render Render, finish func(string) string) []Planned {
	var out []Planned
	for _, chunk := range chunks {
		var text strings.Builder
		var media []events.Segment
		for _, s := range chunk {
			t, isMedia := render(s)
			if isMedia {
				media = append(media, s)
				continue
			}
			text.WriteString(t)
		}
		if t := strings.TrimSpace(text.String()); t != "" {
			if finish != nil {
				t = finish(t)
			}
			out = append(out, Planned{Text: t})
		}
		for _, m := range media {
			out = append(out, Planned{Media: m})
		}
	}
	return out
}

// MediaRefOf is the media:// reference of an outbound media segment: data.object wins over
// an URL that is no media:// reference.
func MediaRefOf(seg events.Segment) string {
	ref := seg.MediaRef()
	if obj := seg.Str("object"); obj != "" && !strings.HasPrefix(ref, MediaScheme) {
		ref = MediaScheme + obj
	}
	return ref
}

// LoadUpload reads a media:// segment for upload: its bytes, content type and a file name
// (data.name, else made from the object name). ok is false when ref is no media://
// reference; a reference that cannot be read is a permanent error.
func (m *Media) LoadUpload(ctx context.Context, platform string, seg events.Segment) (b []byte, contentType, name string, ok bool, err error) {
	ref := MediaRefOf(seg)
	if !strings.HasPrefix(ref, MediaScheme) {
		return nil, "", "", false, nil
	}
	b, contentType, _, err = m.Load(ctx, ref)
	if err != nil {
		return nil, "", "", true, Permanent(fmt.Errorf("%s: %s segment: %w", platform, seg.Type, err))
	}
	name = seg.Str("name")
	if name == "" {
		name = strings.ReplaceAll(strings.TrimPrefix(ref, MediaScheme), "/", "_")
	}
	return b, contentType, name, true, nil
}

// ExtFor is a file name extension for a content type, for uploads whose name has none.
func ExtFor(contentType string) string {
	for _, e := range []struct{ prefix, ext string }{
		{"image/png", ".png"}, {"image/jpeg", ".jpg"}, {"image/gif", ".gif"}, {"image/webp", ".webp"},
		{"audio/ogg", ".ogg"}, {"audio/mpeg", ".mp3"}, {"video/mp4", ".mp4"}, {"application/pdf", ".pdf"},
		{"text/plain", ".txt"},
	} {
		if strings.HasPrefix(contentType, e.prefix) {
			return e.ext
		}
	}
	return ".bin"
}
