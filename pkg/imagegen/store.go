package imagegen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MediaScheme prefixes references to objects of the media object store in text: the tool
// answers "![prompt](media://<name>)" and egress maps such links to the platform's image
// messages.
const MediaScheme = "media://"

// MaxFetchBytes bounds an image downloaded from a URL answer.
const MaxFetchBytes = 32 << 20

// Fetch downloads img.URL into img.Data when the API returned a link only (Zhipu). An image
// that has Data is returned unchanged.
func Fetch(ctx context.Context, hc *http.Client, img Image) (Image, error) {
	if len(img.Data) > 0 {
		return img, nil
	}
	if img.URL == "" {
		return img, fmt.Errorf("%w: neither data nor url", ErrNoImages)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, img.URL, nil)
	if err != nil {
		return img, fmt.Errorf("%w: image url: %v", ErrHTTP, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return img, fmt.Errorf("%w: download image: %w", ErrHTTP, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return img, fmt.Errorf("download image: %w", &HTTPError{StatusCode: resp.StatusCode})
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxFetchBytes+1))
	if err != nil {
		return img, fmt.Errorf("%w: download image: %w", ErrHTTP, err)
	}
	if len(data) > MaxFetchBytes {
		return img, fmt.Errorf("%w: image larger than %d bytes", ErrHTTP, MaxFetchBytes)
	}
	img.Data = data
	img.MimeType = sniff(data, resp.Header.Get("Content-Type"))
	return img, nil
}

// ObjectName is the content address of data: hex SHA-256 plus an extension for the media type
// (".png", ".jpg", ".webp", ".gif", else ".bin"). Equal images share one object.
func ObjectName(data []byte, mimeType string) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]) + extension(mimeType)
}

func extension(mimeType string) string {
	switch strings.ToLower(mimeType) {
	case "image/png":
		return ".png"
	case "image/jpeg", "image/jpg":
		return ".jpg"
	case "image/webp":
		return ".webp"
	case "image/gif":
		return ".gif"
	}
	return ".bin"
}

// Store puts an image's bytes into the media object store under ObjectName and returns the
// name. An object of that name that exists already is reused (content addressing makes the
// write idempotent). The object's Content-Type header carries the media type.
func Store(ctx context.Context, media jetstream.ObjectStore, img Image, description string) (string, error) {
	if len(img.Data) == 0 {
		return "", fmt.Errorf("%w: nothing to store (fetch URL images first)", ErrNoImages)
	}
	mt := img.MimeType
	if mt == "" {
		mt = sniff(img.Data, "")
	}
	name := ObjectName(img.Data, mt)
	if _, err := media.GetInfo(ctx, name); err == nil {
		return name, nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", fmt.Errorf("media store: %w", err)
	}
	meta := jetstream.ObjectMeta{
		Name:        name,
		Description: description,
		Headers:     nats.Header{"Content-Type": []string{mt}},
	}
	if _, err := media.Put(ctx, meta, bytes.NewReader(img.Data)); err != nil {
		return "", fmt.Errorf("media store: put %s: %w", name, err)
	}
	return name, nil
}
