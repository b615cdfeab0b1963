// Package imagegen generates images, separately from chat (seed ADR D7, Grill #3): an image
// model is resolved with GetImageModel(providers, alias, modelID) and called with
// GenerateImages(ctx, model, input, options). Vision input in chat stays an image content
// block of llm.Context; this package only makes pictures.
//
// Drivers (ai.providers.<alias>.driver, or derived from the provider's api):
//
//	openai      POST {baseUrl}/images/generations (b64_json)             default gpt-image-2
//	zhipu       POST {baseUrl}/images/generations (CogView, url, watermark_enabled)
//	                                                                     default cogview-3-flash
//	google      POST {baseUrl}/v1beta/models/{model}:generateContent with IMAGE response
//	(gemini)    modality (inline data)                                   default gemini-2.5-flash-image
//	cloudflare  POST {baseUrl}/accounts/{accountId}/ai/run/{model} (binary image or JSON
//	            base64)                                                  default @cf/black-forest-labs/flux-1-schnell
//
// Results are stored in the media object store under a content address (Store) and the
// generate_image tool (NewTool) returns them as media://<name> references.
package imagegen

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

// Driver names.
const (
	DriverOpenAI     = "openai"
	DriverZhipu      = "zhipu"
	DriverGoogle     = "google"
	DriverCloudflare = "cloudflare"
)

// Sentinel errors. Match with errors.Is.
var (
	// ErrNoDriver: the provider is not an image generation provider (no driver, and its api
	// has no image endpoint).
	ErrNoDriver = errors.New("no image generation driver")
	// ErrBadRequest: the input or options are unusable (empty prompt, malformed size, missing
	// account id).
	ErrBadRequest = errors.New("bad image generation request")
	// ErrNoImages: the server answered but returned no image (refusal, safety filter).
	ErrNoImages = errors.New("no image returned")
	// ErrHTTP wraps a failed HTTP exchange with the image API (see *HTTPError).
	ErrHTTP = errors.New("image API request failed")
)

// HTTPError is a non-2xx answer of an image API. It never contains the key.
type HTTPError struct {
	StatusCode int
	Message    string
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("HTTP %d", e.StatusCode)
	if t := http.StatusText(e.StatusCode); t != "" {
		s += " " + t
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap makes errors.Is(err, ErrHTTP) true.
func (e *HTTPError) Unwrap() error { return ErrHTTP }

// Model is one image model at one provider. Plain data.
type Model struct {
	ID       string
	Provider string // the ai.providers alias
	Driver   string
	BaseURL  string // "" = the driver's default endpoint
	APIKey   string
	Headers  map[string]string
	// Defaults are the provider's imageGeneration block (size, quality, aspect ratio, image
	// size, prompt suffix, watermark, Cloudflare account id).
	Defaults config.ImageGenProvider
}

// Input is what to draw.
type Input struct {
	Prompt string
}

// Options tune one generation. Empty fields take the model's Defaults, then the driver's.
type Options struct {
	Size         string // "1024x1024" (OpenAI, Zhipu, Cloudflare width x height)
	Quality      string // OpenAI GPT Image: low | medium | high | auto; Zhipu cogview-4: standard | hd
	AspectRatio  string // Gemini: "1:1", "16:9", ...
	ImageSize    string // Gemini: "1K", "2K"
	Watermark    *bool  // Zhipu watermark_enabled
	PromptSuffix string // appended to the prompt (after a blank)
	N            int    // images wanted (default 1; drivers that make one per call ignore it)
	// HTTPClient sends the requests (default http.DefaultClient); ctx bounds them.
	HTTPClient *http.Client
}

// Image is one generated image: Data (with MimeType) when the API returned bytes, URL when it
// returned a link only (Zhipu); Fetch turns the latter into the former.
type Image struct {
	Data          []byte
	MimeType      string
	URL           string
	RevisedPrompt string
}

// Driver generates images for one wire format. prompt already carries the suffix; o has
// defaults applied and N >= 1.
type Driver interface {
	Generate(ctx context.Context, hc *http.Client, m *Model, prompt string, o Options) ([]Image, error)
	// DefaultModel is used when neither the call nor the provider names a model.
	DefaultModel() string
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// RegisterDriver makes d the implementation of a driver name, replacing any earlier one.
func RegisterDriver(name string, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	drivers[name] = d
}

func lookupDriver(name string) (Driver, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[name]
	return d, ok
}

func init() {
	RegisterDriver(DriverOpenAI, openaiDriver{})
	RegisterDriver(DriverZhipu, zhipuDriver{})
	RegisterDriver(DriverGoogle, googleDriver{})
	RegisterDriver("gemini", googleDriver{})
	RegisterDriver(DriverCloudflare, cloudflareDriver{})
}

// DriverOf returns the image driver of a provider: its driver field, else the one its api
// implies (openai-* → openai, google-generative-ai → google), else "".
func DriverOf(p config.Provider) string {
	if p.Driver != "" {
		return strings.ToLower(p.Driver)
	}
	switch p.API {
	case llm.APIOpenAICompletions, llm.APIOpenAIResponses:
		return DriverOpenAI
	case llm.APIGoogleGenerative:
		return DriverGoogle
	}
	return ""
}

// ImageProviders lists the aliases that can generate images, sorted: those with a driver
// field first-class, plus OpenAI and Google chat providers (their APIs draw too).
func ImageProviders(providers map[string]config.Provider) []string {
	var out []string
	for _, a := range slices.Sorted(maps.Keys(providers)) {
		if d := DriverOf(providers[a]); d != "" {
			if _, ok := lookupDriver(d); ok {
				out = append(out, a)
			}
		}
	}
	return out
}

// GetImageModel resolves an image model of the provider configured as alias. An empty
// modelID takes the provider's imageGeneration.defaultModel, then the driver's default. The
// key is the provider's apiKey, else the environment variable <ALIAS>_API_KEY (alias
// upper-cased, other characters as "_").
func GetImageModel(providers map[string]config.Provider, alias, modelID string) (*Model, error) {
	p, ok := providers[alias]
	if !ok {
		return nil, fmt.Errorf("%w %q (image providers: %s)", llm.ErrUnknownProvider, alias, strings.Join(ImageProviders(providers), ", "))
	}
	name := DriverOf(p)
	d, ok := lookupDriver(name)
	if !ok {
		return nil, fmt.Errorf("%w for provider %q (set ai.providers.%s.driver to openai, zhipu, google or cloudflare; image providers: %s)",
			ErrNoDriver, alias, alias, strings.Join(ImageProviders(providers), ", "))
	}
	if modelID == "" {
		modelID = p.ImageGeneration.DefaultModel
	}
	if modelID == "" {
		modelID = d.DefaultModel()
	}
	key := p.APIKey
	if key == "" {
		key = os.Getenv(aliasEnvVar(alias))
	}
	return &Model{
		ID: modelID, Provider: alias, Driver: name, BaseURL: p.BaseURL, APIKey: key,
		Headers: maps.Clone(p.Headers), Defaults: p.ImageGeneration,
	}, nil
}

func aliasEnvVar(alias string) string {
	b := []byte(strings.ToUpper(alias))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b) + "_API_KEY"
}

// GenerateImages draws input.Prompt with model. Options left empty take the model's
// Defaults; the prompt suffix is appended after a blank. Failures are errors wrapping
// ErrBadRequest, ErrHTTP (an *HTTPError with the server's message) or ErrNoImages.
func GenerateImages(ctx context.Context, model *Model, input Input, opts Options) ([]Image, error) {
	if model == nil {
		return nil, fmt.Errorf("%w: no model", ErrBadRequest)
	}
	prompt := strings.TrimSpace(input.Prompt)
	if prompt == "" {
		return nil, fmt.Errorf("%w: empty prompt", ErrBadRequest)
	}
	d, ok := lookupDriver(model.Driver)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNoDriver, model.Driver)
	}
	o := opts
	def := model.Defaults
	o.Size = first(o.Size, def.DefaultSize)
	o.Quality = first(o.Quality, def.Quality)
	o.AspectRatio = first(o.AspectRatio, def.AspectRatio)
	o.ImageSize = first(o.ImageSize, def.ImageSize)
	o.PromptSuffix = first(o.PromptSuffix, def.PromptSuffix)
	if o.Watermark == nil {
		o.Watermark = def.WatermarkEnabled
	}
	if o.N <= 0 {
		o.N = 1
	}
	if s := strings.TrimSpace(o.PromptSuffix); s != "" {
		prompt += " " + s
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	imgs, err := d.Generate(ctx, hc, model, prompt, o)
	if err != nil {
		return nil, fmt.Errorf("generate image with %s/%s (%s): %w", model.Provider, model.ID, model.Driver, err)
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("generate image with %s/%s: %w", model.Provider, model.ID, ErrNoImages)
	}
	return imgs, nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
