package turn

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
)

// An image the adapter could not fetch (data.error), or inline bytes that are no image, reach
// the model as a note, not as an image block (issue 37).
func TestMediaPartsImageThatIsNone(t *testing.T) {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"))
	html := base64.StdEncoding.EncodeToString([]byte("<!doctype html><html><body>404 Not Found</body></html>"))
	tests := []struct {
		name  string
		seg   events.Segment
		image string // mime type of the image block, "" for none
		note  string
	}{
		{"fetch failed at the adapter", events.Segment{Type: "image", Data: map[string]any{"url": "https://x.example/a.png", "error": "fetch media: HTTP 404"}},
			"", "[image could not be fetched: fetch media: HTTP 404]"},
		{"inline page", events.Segment{Type: "image", Data: map[string]any{"base64": html, "mimeType": "image/png"}}, "", "[image could not be fetched: not an image"},
		{"inline png declared jpeg", events.Segment{Type: "image", Data: map[string]any{"base64": png, "mimeType": "image/jpeg"}}, "image/png", ""},
		{"stored image keeps its reference", events.Segment{Type: "image", Data: map[string]any{"url": "media://in/x/1", "object": "in/x/1", "error": "old"}}, "", imageRefPrefix + "media://in/x/1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := mediaParts(&events.IMMessage{Content: events.Segments{tt.seg}})
			if len(parts) != 1 {
				t.Fatalf("%d parts, want 1", len(parts))
			}
			p := parts[0]
			switch {
			case tt.image != "":
				if p.Type != llm.ContentImage || p.MimeType != tt.image {
					t.Fatalf("part %+v, want an image block of %s", p, tt.image)
				}
			case p.Type != llm.ContentText || !strings.HasPrefix(p.Text, tt.note):
				t.Fatalf("part %+v, want text starting %q", p, tt.note)
			}
		})
	}
}
