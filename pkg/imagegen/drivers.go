package imagegen

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Default endpoints (tests always configure their own base URL).
const (
	DefaultOpenAIBaseURL     = "https://api.openai.com/v1"
	DefaultZhipuBaseURL      = "https://open.bigmodel.cn/api/paas/v4"
	DefaultGoogleBaseURL     = "https://generativelanguage.googleapis.com"
	DefaultCloudflareBaseURL = "https://api.cloudflare.com/client/v4"
)

// maxImageBody bounds an API answer (base64 of a few large images).
const maxImageBody = 64 << 20

// exchange is one HTTP request/response with an image API.
type exchange struct {
	hc      *http.Client
	m       *Model
	headers map[string]string
}

// post sends a JSON body and returns the answer's body and media type. A non-2xx answer is an
// *HTTPError with the server's message.
func (x exchange) post(ctx context.Context, u string, body any) ([]byte, string, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(raw))
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range x.m.Headers {
		req.Header.Set(k, v)
	}
	for k, v := range x.headers {
		req.Header.Set(k, v)
	}
	resp, err := x.hc.Do(req)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err // the URL may carry a key in its query
		}
		return nil, "", fmt.Errorf("%w: POST %s: %w", ErrHTTP, redact(u), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxImageBody))
	if err != nil {
		return nil, "", fmt.Errorf("%w: read answer: %w", ErrHTTP, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, "", &HTTPError{StatusCode: resp.StatusCode, Message: errorMessage(data)}
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return data, mt, nil
}

func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// errorMessage extracts the message of the usual error shapes: {"error":{"message"}} (OpenAI,
// Zhipu, Google), {"error":"..."}, {"errors":[{"message"}]} (Cloudflare), {"message"}.
func errorMessage(body []byte) string {
	var shape struct {
		Error   json.RawMessage            `json:"error"`
		Errors  []struct{ Message string } `json:"errors"`
		Message string                     `json:"message"`
	}
	if json.Unmarshal(body, &shape) == nil {
		var s string
		if json.Unmarshal(shape.Error, &s) == nil && s != "" {
			return s
		}
		var obj struct{ Message string }
		if json.Unmarshal(shape.Error, &obj) == nil && obj.Message != "" {
			return obj.Message
		}
		if len(shape.Errors) > 0 && shape.Errors[0].Message != "" {
			return shape.Errors[0].Message
		}
		if shape.Message != "" {
			return shape.Message
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func base(m *Model, def string) string {
	if m.BaseURL != "" {
		return strings.TrimRight(m.BaseURL, "/")
	}
	return def
}

func bearer(key string) map[string]string {
	if key == "" {
		return nil
	}
	return map[string]string{"Authorization": "Bearer " + key}
}

func decodeB64(s string) ([]byte, error) {
	// Some servers wrap the payload as a data URL.
	if strings.HasPrefix(s, "data:") {
		if i := strings.IndexByte(s, ','); i >= 0 {
			s = s[i+1:]
		}
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: image is not valid base64: %v", ErrHTTP, err)
	}
	return b, nil
}

// sniff returns the image media type of data, falling back to declared.
func sniff(data []byte, declared string) string {
	if t := http.DetectContentType(data); strings.HasPrefix(t, "image/") {
		return t
	}
	if declared != "" {
		return declared
	}
	return "application/octet-stream"
}

// ---- OpenAI images ----

type openaiDriver struct{}

func (openaiDriver) DefaultModel() string { return "gpt-image-2" }

func (openaiDriver) Generate(ctx context.Context, hc *http.Client, m *Model, prompt string, o Options) ([]Image, error) {
	body := map[string]any{"model": m.ID, "prompt": prompt, "n": o.N}
	if o.Size != "" {
		body["size"] = o.Size
	}
	if o.Quality != "" {
		body["quality"] = o.Quality
	}
	if strings.HasPrefix(m.ID, "dall-e") {
		// GPT Image models always answer base64 and reject response_format; DALL·E defaults to
		// URLs.
		body["response_format"] = "b64_json"
	}
	raw, _, err := exchange{hc, m, bearer(m.APIKey)}.post(ctx, base(m, DefaultOpenAIBaseURL)+"/images/generations", body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []struct {
			B64JSON       string `json:"b64_json"`
			URL           string `json:"url"`
			RevisedPrompt string `json:"revised_prompt"`
		} `json:"data"`
		OutputFormat string `json:"output_format"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: decode answer: %v", ErrHTTP, err)
	}
	declared := ""
	if out.OutputFormat != "" {
		declared = "image/" + out.OutputFormat
	}
	var imgs []Image
	for _, d := range out.Data {
		img := Image{URL: d.URL, RevisedPrompt: d.RevisedPrompt}
		if d.B64JSON != "" {
			if img.Data, err = decodeB64(d.B64JSON); err != nil {
				return nil, err
			}
			img.MimeType = sniff(img.Data, declared)
		}
		if img.Data != nil || img.URL != "" {
			imgs = append(imgs, img)
		}
	}
	return imgs, nil
}

// ---- Zhipu CogView ----

type zhipuDriver struct{}

func (zhipuDriver) DefaultModel() string { return "cogview-3-flash" }

func (zhipuDriver) Generate(ctx context.Context, hc *http.Client, m *Model, prompt string, o Options) ([]Image, error) {
	body := map[string]any{"model": m.ID, "prompt": prompt}
	if o.Size != "" {
		body["size"] = o.Size
	}
	if o.Quality != "" {
		body["quality"] = o.Quality
	}
	if o.Watermark != nil {
		body["watermark_enabled"] = *o.Watermark
	}
	raw, _, err := exchange{hc, m, bearer(m.APIKey)}.post(ctx, base(m, DefaultZhipuBaseURL)+"/images/generations", body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []struct {
			URL string `json:"url"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: decode answer: %v", ErrHTTP, err)
	}
	var imgs []Image
	for _, d := range out.Data {
		if d.URL != "" {
			imgs = append(imgs, Image{URL: d.URL})
		}
	}
	return imgs, nil
}

// ---- Google Gemini image (generateContent with IMAGE modality) ----

type googleDriver struct{}

func (googleDriver) DefaultModel() string { return "gemini-2.5-flash-image" }

func (googleDriver) Generate(ctx context.Context, hc *http.Client, m *Model, prompt string, o Options) ([]Image, error) {
	gen := map[string]any{"responseModalities": []string{"TEXT", "IMAGE"}}
	ic := map[string]any{}
	if o.AspectRatio != "" {
		ic["aspectRatio"] = o.AspectRatio
	}
	if o.ImageSize != "" {
		ic["imageSize"] = o.ImageSize
	}
	if len(ic) > 0 {
		gen["imageConfig"] = ic
	}
	body := map[string]any{
		"contents":         []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": prompt}}}},
		"generationConfig": gen,
	}
	b := strings.TrimSuffix(base(m, DefaultGoogleBaseURL), "/v1beta")
	u := b + "/v1beta/models/" + url.PathEscape(strings.TrimPrefix(m.ID, "models/")) + ":generateContent"
	var hdr map[string]string
	if m.APIKey != "" {
		hdr = map[string]string{"x-goog-api-key": m.APIKey}
	}
	raw, _, err := exchange{hc, m, hdr}.post(ctx, u, body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Candidates []struct {
			Content struct {
				Parts []struct {
					Text       string `json:"text"`
					InlineData *struct {
						MimeType string `json:"mimeType"`
						Data     string `json:"data"`
					} `json:"inlineData"`
				} `json:"parts"`
			} `json:"content"`
			FinishReason string `json:"finishReason"`
		} `json:"candidates"`
		PromptFeedback struct {
			BlockReason string `json:"blockReason"`
		} `json:"promptFeedback"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: decode answer: %v", ErrHTTP, err)
	}
	var imgs []Image
	var said []string
	for _, c := range out.Candidates {
		for _, p := range c.Content.Parts {
			if p.InlineData != nil && p.InlineData.Data != "" {
				data, err := decodeB64(p.InlineData.Data)
				if err != nil {
					return nil, err
				}
				imgs = append(imgs, Image{Data: data, MimeType: sniff(data, p.InlineData.MimeType)})
			} else if p.Text != "" {
				said = append(said, p.Text)
			}
		}
		if len(imgs) == 0 && c.FinishReason != "" && c.FinishReason != "STOP" {
			said = append(said, "finishReason "+c.FinishReason)
		}
	}
	if len(imgs) == 0 {
		if out.PromptFeedback.BlockReason != "" {
			said = append(said, "blocked: "+out.PromptFeedback.BlockReason)
		}
		return nil, fmt.Errorf("%w: %s", ErrNoImages, strings.Join(said, "; "))
	}
	if len(said) > 0 {
		imgs[0].RevisedPrompt = strings.Join(said, "\n")
	}
	return imgs, nil
}

// ---- Cloudflare Workers AI ----

type cloudflareDriver struct{}

func (cloudflareDriver) DefaultModel() string { return "@cf/black-forest-labs/flux-1-schnell" }

func (cloudflareDriver) Generate(ctx context.Context, hc *http.Client, m *Model, prompt string, o Options) ([]Image, error) {
	b := base(m, DefaultCloudflareBaseURL)
	if !strings.Contains(b, "/accounts/") {
		if m.Defaults.AccountID == "" {
			return nil, fmt.Errorf("%w: cloudflare needs ai.providers.%s.imageGeneration.accountId (or a baseUrl with /accounts/<id>)", ErrBadRequest, m.Provider)
		}
		b += "/accounts/" + url.PathEscape(m.Defaults.AccountID)
	}
	body := map[string]any{"prompt": prompt}
	if o.Size != "" {
		w, h, err := parseSize(o.Size)
		if err != nil {
			return nil, err
		}
		body["width"], body["height"] = w, h
	}
	raw, mt, err := exchange{hc, m, bearer(m.APIKey)}.post(ctx, b+"/ai/run/"+m.ID, body)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(mt, "image/") { // SDXL-style models answer the image itself
		return []Image{{Data: raw, MimeType: sniff(raw, mt)}}, nil
	}
	var out struct {
		Result struct {
			Image string `json:"image"`
		} `json:"result"`
		Success *bool `json:"success"`
		Errors  []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: decode answer: %v", ErrHTTP, err)
	}
	if out.Success != nil && !*out.Success {
		msg := "success: false"
		if len(out.Errors) > 0 {
			msg = out.Errors[0].Message
		}
		return nil, fmt.Errorf("%w: %s", ErrNoImages, msg)
	}
	if out.Result.Image == "" {
		return nil, nil
	}
	data, err := decodeB64(out.Result.Image)
	if err != nil {
		return nil, err
	}
	return []Image{{Data: data, MimeType: sniff(data, "image/jpeg")}}, nil
}

// parseSize reads "1024x768".
func parseSize(s string) (int, int, error) {
	ws, hs, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if !ok || err1 != nil || err2 != nil || w <= 0 || h <= 0 || w > 8192 || h > 8192 {
		return 0, 0, fmt.Errorf("%w: size %q: want WIDTHxHEIGHT, e.g. 1024x1024", ErrBadRequest, s)
	}
	return w, h, nil
}
