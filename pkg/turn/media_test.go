package turn

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
)

func TestMediaText(t *testing.T) {
	tests := []struct {
		name string
		seg  events.Segment
		want string
		ok   bool
	}{
		{"text is not media", events.Segment{Type: events.SegText, Data: map[string]any{"text": "hi", "url": "x"}}, "", false},
		{"voice with reference and details", events.Segment{Type: events.SegVoice, Data: map[string]any{"url": "media://ab.amr", "format": "amr", "duration": 3.0}},
			"[voice message: media://ab.amr (amr, 3s)]", true},
		{"file with name and size", events.Segment{Type: events.SegFile, Data: map[string]any{"file": "https://f/r.pdf", "name": "r.pdf", "size": 12345.0}},
			"[file r.pdf: https://f/r.pdf (12345 bytes)]", true},
		{"inline video", events.Segment{Type: events.SegVideo, Data: map[string]any{"base64": "AAAA", "mimeType": "video/mp4"}},
			"[video: inline data (video/mp4)]", true},
		{"face", events.Segment{Type: events.SegFace, Data: map[string]any{"id": "14", "text": "微笑"}}, "[face 14 微笑]", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := mediaText(tc.seg)
			if got != tc.want || ok != tc.ok {
				t.Errorf("mediaText = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
