package netguard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// FetchOptions bound one Fetch.
type FetchOptions struct {
	// MaxBytes caps the body read (default 1 MiB); a longer body is cut and Truncated set.
	MaxBytes int64
	// Timeout bounds the whole request (default 30s).
	Timeout time.Duration
	// Accept and UserAgent headers (defaults are sensible for web pages).
	Accept    string
	UserAgent string
}

// FetchResult is a fetched response.
type FetchResult struct {
	URL         string // final URL after redirects
	Status      int
	ContentType string
	Body        []byte
	Truncated   bool
}

// Fetch GETs rawURL through the guard: the URL is checked, every redirect re-checked, every
// connection dial-checked, the body size and the total time bounded. A non-2xx status is
// returned as a result, not an error, so callers can show it.
func (g *Guard) Fetch(ctx context.Context, rawURL string, o FetchOptions) (*FetchResult, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 20
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.UserAgent == "" {
		o.UserAgent = "agentbus-web-fetch/1.0"
	}
	if o.Accept == "" {
		o.Accept = "text/html,application/xhtml+xml,text/plain,application/json;q=0.9,*/*;q=0.5"
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse URL: %w", err)
	}
	if err := g.CheckURL(u); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("User-Agent", o.UserAgent)
	req.Header.Set("Accept", o.Accept)
	resp, err := g.Client(0).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, o.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read body of %s: %w", resp.Request.URL.Redacted(), err)
	}
	r := &FetchResult{URL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body}
	if int64(len(body)) > o.MaxBytes {
		r.Body, r.Truncated = body[:o.MaxBytes], true
	}
	return r, nil
}
