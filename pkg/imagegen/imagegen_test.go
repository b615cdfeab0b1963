package imagegen

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

// testPNG is a real 2x2 PNG.
func testPNG(t testing.TB) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{255, 0, 0, 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// recorded is one request the fake vendor server saw.
type recorded struct {
	Method, Path, Auth, GoogKey string
	Body                        map[string]any
}

// vendor fakes the four image APIs on one httptest server. Routes follow each vendor's wire
// format; the answer depends on the path.
type vendor struct {
	srv  *httptest.Server
	png  []byte
	mu   sync.Mutex
	reqs []recorded
}

func newVendor(t *testing.T) *vendor {
	v := &vendor{png: testPNG(t)}
	b64 := base64.StdEncoding.EncodeToString(v.png)
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		rec := recorded{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization"), GoogKey: r.Header.Get("x-goog-api-key")}
		json.Unmarshal(raw, &rec.Body)
		v.mu.Lock()
		v.reqs = append(v.reqs, rec)
		v.mu.Unlock()
		prompt, _ := rec.Body["prompt"].(string)
		jsonAnswer := func(status int, body any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(body)
		}
		switch {
		case strings.HasPrefix(prompt, "forbidden"):
			jsonAnswer(400, map[string]any{"error": map[string]any{"code": "1301", "message": "content violates policy"}})
		case r.URL.Path == "/openai/v1/images/generations":
			jsonAnswer(200, map[string]any{"created": 1, "data": []any{map[string]any{"b64_json": b64, "revised_prompt": "a red pixel"}}, "output_format": "png"})
		case r.URL.Path == "/zhipu/api/paas/v4/images/generations":
			jsonAnswer(200, map[string]any{"created": 1, "data": []any{map[string]any{"url": v.srv.URL + "/files/cog.png"}}})
		case r.URL.Path == "/files/cog.png":
			w.Header().Set("Content-Type", "image/png")
			w.Write(v.png)
		case r.URL.Path == "/google/v1beta/models/gemini-2.5-flash-image:generateContent":
			jsonAnswer(200, map[string]any{"candidates": []any{map[string]any{
				"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"text": "Here is your image."}, map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": b64}}}},
				"finishReason": "STOP"}}})
		case r.URL.Path == "/google/v1beta/models/refuser:generateContent":
			jsonAnswer(200, map[string]any{"candidates": []any{map[string]any{
				"content": map[string]any{"parts": []any{map[string]any{"text": "I can't draw that."}}}, "finishReason": "STOP"}}})
		case r.URL.Path == "/cf/accounts/acc123/ai/run/@cf/black-forest-labs/flux-1-schnell":
			jsonAnswer(200, map[string]any{"result": map[string]any{"image": b64}, "success": true, "errors": []any{}, "messages": []any{}})
		case r.URL.Path == "/cf/accounts/acc123/ai/run/@cf/stabilityai/stable-diffusion-xl-base-1.0":
			w.Header().Set("Content-Type", "image/png")
			w.Write(v.png)
		case r.URL.Path == "/cf/accounts/acc123/ai/run/@cf/broken":
			jsonAnswer(200, map[string]any{"result": nil, "success": false, "errors": []any{map[string]any{"code": 5006, "message": "Error: oneOf at '/' not met"}}})
		default:
			jsonAnswer(404, map[string]any{"error": map[string]any{"message": "no route " + r.URL.Path}})
		}
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *vendor) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.reqs)
}

func (v *vendor) last() recorded {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := len(v.reqs) - 1; i >= 0; i-- {
		if !strings.HasPrefix(v.reqs[i].Path, "/files/") {
			return v.reqs[i]
		}
	}
	return recorded{}
}

func (v *vendor) providers() map[string]config.Provider {
	yes := true
	return map[string]config.Provider{
		"openai-image": {API: llm.APIOpenAICompletions, APIKey: "sk-img", BaseURL: v.srv.URL + "/openai/v1",
			ImageGeneration: config.ImageGenProvider{Quality: "medium"}},
		"zhipu-vl": {Driver: "zhipu", APIKey: "zp-key", BaseURL: v.srv.URL + "/zhipu/api/paas/v4",
			ImageGeneration: config.ImageGenProvider{DefaultSize: "1024x1024", PromptSuffix: "photorealistic", WatermarkEnabled: &yes}},
		"gemini-image": {Driver: "google", APIKey: "g-key", BaseURL: v.srv.URL + "/google",
			ImageGeneration: config.ImageGenProvider{AspectRatio: "1:1", ImageSize: "1K"}},
		"cf": {Driver: "cloudflare", APIKey: "cf-token", BaseURL: v.srv.URL + "/cf",
			ImageGeneration: config.ImageGenProvider{AccountID: "acc123"}},
		"cf-noacct": {Driver: "cloudflare", BaseURL: v.srv.URL + "/cf"},
		"chat-only": {API: llm.APIOllamaChat},
	}
}

func TestGetImageModel(t *testing.T) {
	v := newVendor(t)
	ps := v.providers()
	t.Setenv("CF_NOACCT_API_KEY", "from-env")
	tests := []struct {
		alias, model   string
		wantID, driver string
		wantKey        string
		wantErr        error
	}{
		{"openai-image", "", "gpt-image-2", DriverOpenAI, "sk-img", nil},
		{"zhipu-vl", "", "cogview-3-flash", DriverZhipu, "zp-key", nil},
		{"zhipu-vl", "cogview-4", "cogview-4", DriverZhipu, "zp-key", nil},
		{"gemini-image", "", "gemini-2.5-flash-image", DriverGoogle, "g-key", nil},
		{"cf", "", "@cf/black-forest-labs/flux-1-schnell", DriverCloudflare, "cf-token", nil},
		{"cf-noacct", "", "@cf/black-forest-labs/flux-1-schnell", DriverCloudflare, "from-env", nil},
		{"chat-only", "", "", "", "", ErrNoDriver},
		{"nope", "", "", "", "", llm.ErrUnknownProvider},
	}
	for _, tt := range tests {
		m, err := GetImageModel(ps, tt.alias, tt.model)
		if !errors.Is(err, tt.wantErr) {
			t.Fatalf("%s: err %v, want %v", tt.alias, err, tt.wantErr)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "cf, cf-noacct, gemini-image, openai-image, zhipu-vl") {
				t.Errorf("%s: error does not list the image providers: %v", tt.alias, err)
			}
			continue
		}
		if m.ID != tt.wantID || m.Driver != tt.driver || m.APIKey != tt.wantKey || m.Provider != tt.alias {
			t.Errorf("%s: %+v", tt.alias, m)
		}
	}
}

func TestGenerateImages(t *testing.T) {
	v := newVendor(t)
	ps := v.providers()
	no := false
	tests := []struct {
		name, alias, model string
		prompt             string
		opts               Options
		wantPath           string
		wantAuth           string
		wantBody           map[string]any // fields that must be in the request body
		wantURL            bool           // answer is a link (Zhipu)
		wantErr            error
		wantErrText        string
	}{
		{name: "openai b64_json", alias: "openai-image", prompt: "a cat", opts: Options{Size: "1024x1536"},
			wantPath: "/openai/v1/images/generations", wantAuth: "Bearer sk-img",
			wantBody: map[string]any{"model": "gpt-image-2", "prompt": "a cat", "size": "1024x1536", "quality": "medium", "n": float64(1)}},
		{name: "openai dall-e asks for b64_json", alias: "openai-image", model: "dall-e-3", prompt: "a dog",
			wantPath: "/openai/v1/images/generations", wantAuth: "Bearer sk-img",
			wantBody: map[string]any{"model": "dall-e-3", "response_format": "b64_json"}},
		{name: "zhipu cogview with defaults, suffix and watermark", alias: "zhipu-vl", prompt: "a lake",
			wantPath: "/zhipu/api/paas/v4/images/generations", wantAuth: "Bearer zp-key", wantURL: true,
			wantBody: map[string]any{"model": "cogview-3-flash", "prompt": "a lake photorealistic", "size": "1024x1024", "watermark_enabled": true}},
		{name: "zhipu watermark off per call", alias: "zhipu-vl", model: "cogview-4", prompt: "a lake", opts: Options{Watermark: &no, Quality: "hd"},
			wantPath: "/zhipu/api/paas/v4/images/generations", wantAuth: "Bearer zp-key", wantURL: true,
			wantBody: map[string]any{"model": "cogview-4", "watermark_enabled": false, "quality": "hd"}},
		{name: "gemini inline data", alias: "gemini-image", prompt: "a banana", opts: Options{AspectRatio: "16:9"},
			wantPath: "/google/v1beta/models/gemini-2.5-flash-image:generateContent",
			wantBody: map[string]any{"generationConfig": map[string]any{"responseModalities": []any{"TEXT", "IMAGE"}, "imageConfig": map[string]any{"aspectRatio": "16:9", "imageSize": "1K"}}}},
		{name: "gemini text only is ErrNoImages", alias: "gemini-image", model: "refuser", prompt: "x",
			wantPath: "/google/v1beta/models/refuser:generateContent", wantErr: ErrNoImages, wantErrText: "I can't draw that."},
		{name: "cloudflare flux JSON base64", alias: "cf", prompt: "a bridge", opts: Options{Size: "512x768"},
			wantPath: "/cf/accounts/acc123/ai/run/@cf/black-forest-labs/flux-1-schnell", wantAuth: "Bearer cf-token",
			wantBody: map[string]any{"prompt": "a bridge", "width": float64(512), "height": float64(768)}},
		{name: "cloudflare binary answer", alias: "cf", model: "@cf/stabilityai/stable-diffusion-xl-base-1.0", prompt: "a bridge",
			wantPath: "/cf/accounts/acc123/ai/run/@cf/stabilityai/stable-diffusion-xl-base-1.0", wantAuth: "Bearer cf-token"},
		{name: "cloudflare success false", alias: "cf", model: "@cf/broken", prompt: "a bridge",
			wantPath: "/cf/accounts/acc123/ai/run/@cf/broken", wantErr: ErrNoImages, wantErrText: "oneOf"},
		{name: "cloudflare bad size", alias: "cf", prompt: "a bridge", opts: Options{Size: "big"}, wantErr: ErrBadRequest},
		{name: "cloudflare without account", alias: "cf-noacct", prompt: "a bridge", wantErr: ErrBadRequest, wantErrText: "accountId"},
		{name: "API error carries the server message", alias: "zhipu-vl", prompt: "forbidden thing",
			wantPath: "/zhipu/api/paas/v4/images/generations", wantErr: ErrHTTP, wantErrText: "HTTP 400 Bad Request: content violates policy"},
		{name: "empty prompt", alias: "openai-image", prompt: "  ", wantErr: ErrBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := GetImageModel(ps, tt.alias, tt.model)
			if err != nil {
				t.Fatal(err)
			}
			before := v.count()
			imgs, err := GenerateImages(context.Background(), m, Input{Prompt: tt.prompt}, tt.opts)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantErrText) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.wantErrText)
				}
				if strings.Contains(err.Error(), m.APIKey) && m.APIKey != "" {
					t.Errorf("error leaks the key: %v", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if tt.wantPath == "" {
				if v.count() != before {
					t.Errorf("request sent for a bad request")
				}
				return
			}
			req := v.last()
			if req.Path != tt.wantPath || req.Method != http.MethodPost {
				t.Errorf("request %s %s, want POST %s", req.Method, req.Path, tt.wantPath)
			}
			if tt.wantAuth != "" && req.Auth != tt.wantAuth {
				t.Errorf("authorization %q, want %q", req.Auth, tt.wantAuth)
			}
			if m.Driver == DriverGoogle && req.GoogKey != "g-key" {
				t.Errorf("x-goog-api-key %q", req.GoogKey)
			}
			for k, want := range tt.wantBody {
				got, _ := json.Marshal(req.Body[k])
				w, _ := json.Marshal(want)
				if string(got) != string(w) {
					t.Errorf("body.%s = %s, want %s", k, got, w)
				}
			}
			if m.Driver == DriverGoogle {
				contents, _ := json.Marshal(req.Body["contents"])
				if !strings.Contains(string(contents), `"text":"`+tt.prompt+`"`) {
					t.Errorf("contents %s lack the prompt", contents)
				}
			}
			if err != nil {
				return
			}
			if len(imgs) != 1 {
				t.Fatalf("%d images", len(imgs))
			}
			if tt.wantURL {
				if imgs[0].URL == "" || imgs[0].Data != nil {
					t.Fatalf("want a URL answer: %+v", imgs[0])
				}
				got, err := Fetch(context.Background(), nil, imgs[0])
				if err != nil {
					t.Fatal(err)
				}
				imgs[0] = got
			}
			if !bytes.Equal(imgs[0].Data, v.png) || imgs[0].MimeType != "image/png" {
				t.Errorf("image %d bytes %q, want the PNG", len(imgs[0].Data), imgs[0].MimeType)
			}
		})
	}
}

func TestParseSizeAndNames(t *testing.T) {
	if w, h, err := parseSize(" 1024X768 "); err != nil || w != 1024 || h != 768 {
		t.Errorf("parseSize = %d %d %v", w, h, err)
	}
	for _, bad := range []string{"", "1024", "x768", "0x10", "-1x5", "99999x1"} {
		if _, _, err := parseSize(bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("parseSize(%q) = %v", bad, err)
		}
	}
	n := ObjectName([]byte("abc"), "image/jpeg")
	if n != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.jpg" {
		t.Errorf("ObjectName = %s", n)
	}
	if got := altText("a [weird]\n prompt"); got != "a (weird) prompt" {
		t.Errorf("altText = %q", got)
	}
}
