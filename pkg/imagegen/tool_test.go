package imagegen

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/tools"
)

func mediaStore(t *testing.T) jetstream.ObjectStore {
	t.Helper()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	obs, err := ns.JS.ObjectStore(context.Background(), events.ObjectMedia)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

func TestGenerateImageTool(t *testing.T) {
	v := newVendor(t)
	obs := mediaStore(t)
	ai := config.AI{Providers: v.providers(), ImageGeneration: config.ImageGeneration{WatermarkEnabled: false}}
	tool, err := NewTool(ToolConfig{AI: ai, Media: obs})
	if err != nil {
		t.Fatal(err)
	}
	if tool.Name != "generate_image" || !strings.Contains(tool.Description, "zhipu-vl") {
		t.Fatalf("tool %s: %s", tool.Name, tool.Description)
	}
	var schema struct {
		Required   []string
		Properties map[string]any
	}
	json.Unmarshal(tool.Parameters, &schema)
	if strings.Join(schema.Required, ",") != "provider_alias,prompt" || len(schema.Properties) != 8 {
		t.Fatalf("schema %s", tool.Parameters)
	}
	pngName := ObjectName(v.png, "image/png")
	tests := []struct {
		name    string
		args    map[string]any
		isError bool
		want    []string
		body    map[string]any
	}{
		{name: "zhipu url answer is downloaded and stored", args: map[string]any{"provider_alias": "zhipu-vl", "prompt": "a [red] lake\nat dawn"},
			want: []string{"with zhipu-vl/cogview-3-flash", "media://" + pngName, "![a (red) lake at dawn](media://" + pngName + ")"},
			body: map[string]any{"watermark_enabled": true}}, // the provider's default beats the global one
		{name: "gemini options", args: map[string]any{"provider_alias": "gemini-image", "prompt": "a banana", "aspect_ratio": "4:3", "image_size": "2K"},
			want: []string{"gemini-image/gemini-2.5-flash-image", "](media://" + pngName + ")"}},
		{name: "openai with model, size, quality", args: map[string]any{"provider_alias": "openai-image", "prompt": "a cat", "model": "gpt-image-1", "size": "1024x1024", "quality": "high"},
			want: []string{"openai-image/gpt-image-1"}, body: map[string]any{"quality": "high", "size": "1024x1024", "model": "gpt-image-1"}},
		{name: "watermark argument", args: map[string]any{"provider_alias": "zhipu-vl", "prompt": "a lake", "watermark_enabled": false},
			want: []string{"media://"}, body: map[string]any{"watermark_enabled": false}},
		{name: "unknown provider", args: map[string]any{"provider_alias": "nope", "prompt": "x"}, isError: true, want: []string{"unknown provider", "image providers: cf, cf-noacct"}},
		{name: "chat provider without driver", args: map[string]any{"provider_alias": "chat-only", "prompt": "x"}, isError: true, want: []string{"no image generation driver"}},
		{name: "API refusal", args: map[string]any{"provider_alias": "openai-image", "prompt": "forbidden"}, isError: true, want: []string{"content violates policy"}},
		{name: "missing prompt", args: map[string]any{"provider_alias": "openai-image"}, isError: true, want: []string{"prompt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := tool.CheckArgs(tt.args)
			if err != nil {
				if !tt.isError {
					t.Fatalf("args rejected: %v", err)
				}
				return // schema validation stops it before execution: fine for error cases
			}
			res := tool.Run(context.Background(), tools.Call{ID: "c1", Args: args})
			if res.IsError != tt.isError {
				t.Fatalf("isError=%v: %s", res.IsError, res.Text())
			}
			for _, w := range tt.want {
				if !strings.Contains(res.Text(), w) {
					t.Errorf("result lacks %q:\n%s", w, res.Text())
				}
			}
			req := v.last()
			for k, want := range tt.body {
				got, _ := json.Marshal(req.Body[k])
				w, _ := json.Marshal(want)
				if string(got) != string(w) {
					t.Errorf("request body.%s = %s, want %s", k, got, w)
				}
			}
			if tt.isError {
				return
			}
			var det ToolDetails
			if err := json.Unmarshal(res.Details, &det); err != nil || len(det.Images) != 1 {
				t.Fatalf("details %s: %v", res.Details, err)
			}
			data, err := obs.GetBytes(context.Background(), det.Images[0].Name)
			if err != nil || !bytes.Equal(data, v.png) {
				t.Fatalf("stored object: %d bytes, %v", len(data), err)
			}
			info, err := obs.GetInfo(context.Background(), det.Images[0].Name)
			if err != nil || info.Headers.Get("Content-Type") != "image/png" {
				t.Fatalf("object info %+v %v", info, err)
			}
		})
	}
	// Content addressing: the same picture stored many times is one object.
	n := 0
	lister, err := obs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n = len(lister)
	if n != 1 {
		t.Errorf("%d objects in media, want 1", n)
	}
}

func TestNewToolNeedsMedia(t *testing.T) {
	if _, err := NewTool(ToolConfig{}); err == nil {
		t.Fatal("no media store accepted")
	}
}
