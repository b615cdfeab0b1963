package imagegen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/tools"
)

// ToolName is the name of the image tool.
const ToolName = "generate_image"

// ToolConfig wires the generate_image tool.
type ToolConfig struct {
	// AI is the ai: block: providers (with driver / imageGeneration) and the global
	// imageGeneration defaults.
	AI config.AI
	// Media is the media object store where images are kept (required).
	Media jetstream.ObjectStore
	// HTTPClient for the image APIs and URL downloads (default http.DefaultClient).
	HTTPClient *http.Client
	// Timeout bounds one call, generation and storing included (default 2 minutes).
	Timeout time.Duration
	Log     *slog.Logger
}

// ToolArgs are generate_image's parameters (seed "工具参数").
type ToolArgs struct {
	ProviderAlias    string `json:"provider_alias" jsonschema:"the ai.providers entry to draw with"`
	Prompt           string `json:"prompt" jsonschema:"what to draw, in detail"`
	Model            string `json:"model,omitempty" jsonschema:"image model id (default: the provider's imageGeneration.defaultModel)"`
	Size             string `json:"size,omitempty" jsonschema:"WIDTHxHEIGHT, e.g. 1024x1024 (OpenAI, Zhipu, Cloudflare)"`
	Quality          string `json:"quality,omitempty" jsonschema:"GPT Image: low, medium, high or auto; CogView-4: standard or hd"`
	AspectRatio      string `json:"aspect_ratio,omitempty" jsonschema:"Gemini: 1:1, 16:9, 9:16, 4:3, 3:4, ..."`
	ImageSize        string `json:"image_size,omitempty" jsonschema:"Gemini: 1K or 2K"`
	WatermarkEnabled *bool  `json:"watermark_enabled,omitempty" jsonschema:"Zhipu: whether to add the AI watermark"`
}

// ImageRef describes one stored image in the tool result's Details.
type ImageRef struct {
	Ref      string `json:"ref"`  // media://<name>
	Name     string `json:"name"` // object name in the media store
	MimeType string `json:"mimeType"`
	Bytes    int    `json:"bytes"`
}

// ToolDetails is the Details payload of a successful generate_image result.
type ToolDetails struct {
	Provider string     `json:"provider"`
	Model    string     `json:"model"`
	Images   []ImageRef `json:"images"`
}

// NewTool builds the generate_image tool: it resolves the provider's image model, generates,
// downloads URL answers, stores every image in the media object store and answers with the
// references and a Markdown image link per image, "![<prompt>](media://<name>)", which egress
// turns into an image message. Failures (unknown provider, API error, refusal) are error
// results the model can read and act on.
//
// The tool is not Idempotent: a repeated call costs money and yields a different picture.
func NewTool(cfg ToolConfig) (tools.Tool, error) {
	if cfg.Media == nil {
		return tools.Tool{}, errors.New("imagegen: ToolConfig.Media (the media object store) is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	aliases := ImageProviders(cfg.AI.Providers)
	desc := "Generate an image from a text prompt and send it to the chat. Use only when the user asks for a picture to be drawn or generated."
	if len(aliases) > 0 {
		desc += " Image providers (provider_alias): " + strings.Join(aliases, ", ") + "."
	}
	return tools.New(ToolName, desc, func(ctx context.Context, call tools.Call, a ToolArgs) (tools.Result, error) {
		return runTool(ctx, cfg, a), nil
	}, tools.WithKeywords("image", "draw", "picture", "generate", "画", "图", "生图", "绘画"), tools.WithSource("builtin"))
}

func runTool(ctx context.Context, cfg ToolConfig, a ToolArgs) tools.Result {
	if strings.TrimSpace(a.Prompt) == "" {
		return tools.ErrorResult("generate_image: prompt is required")
	}
	m, err := GetImageModel(cfg.AI.Providers, a.ProviderAlias, a.Model)
	if err != nil {
		return tools.ErrorResult("generate_image: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	wm := a.WatermarkEnabled
	if wm == nil && m.Defaults.WatermarkEnabled == nil {
		g := cfg.AI.ImageGeneration.WatermarkEnabled
		wm = &g
	}
	start := time.Now()
	imgs, err := GenerateImages(ctx, m, Input{Prompt: a.Prompt}, Options{
		Size: a.Size, Quality: a.Quality, AspectRatio: a.AspectRatio, ImageSize: a.ImageSize,
		Watermark: wm, HTTPClient: cfg.HTTPClient,
	})
	if err != nil {
		cfg.Log.Warn("image generation failed", "provider", m.Provider, "model", m.ID, "error", err)
		return tools.ErrorResult("generate_image: %v", err)
	}
	det := ToolDetails{Provider: m.Provider, Model: m.ID}
	var b strings.Builder
	alt := altText(a.Prompt)
	for _, img := range imgs {
		img, err := Fetch(ctx, cfg.HTTPClient, img)
		if err != nil {
			return tools.ErrorResult("generate_image: %v", err)
		}
		name, err := Store(ctx, cfg.Media, img, "generate_image "+m.Provider+"/"+m.ID+": "+truncate(a.Prompt, 200))
		if err != nil {
			return tools.ErrorResult("generate_image: %v", err)
		}
		ref := MediaScheme + name
		det.Images = append(det.Images, ImageRef{Ref: ref, Name: name, MimeType: img.MimeType, Bytes: len(img.Data)})
		fmt.Fprintf(&b, "![%s](%s)\n", alt, ref)
	}
	cfg.Log.Info("image generated", "provider", m.Provider, "model", m.ID, "images", len(det.Images), "took", time.Since(start).Round(time.Millisecond))
	head := fmt.Sprintf("Generated %d image(s) with %s/%s and stored them as %s. Include the Markdown image line(s) below in your reply so the user receives the picture:\n",
		len(det.Images), m.Provider, m.ID, refsOf(det.Images))
	raw, _ := json.Marshal(det)
	r := tools.TextResult(head + strings.TrimRight(b.String(), "\n"))
	r.Details = raw
	return r
}

func refsOf(rs []ImageRef) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.Ref
	}
	return strings.Join(s, ", ")
}

// altText makes a prompt safe as Markdown alt text: one line, no brackets, at most 80 runes.
func altText(p string) string {
	p = strings.Join(strings.Fields(p), " ")
	p = strings.NewReplacer("[", "(", "]", ")").Replace(p)
	return truncate(p, 80)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
