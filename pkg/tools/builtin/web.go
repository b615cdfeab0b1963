package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/netguard"
	"github.com/agentbus/agentbus/pkg/tools"
)

const (
	defaultFetchChars = 20000
	maxFetchChars     = 100000
)

type webFetch struct {
	guard    *netguard.Guard
	maxBytes int64
	timeout  time.Duration
}

type fetchArgs struct {
	URL      string `json:"url" jsonschema:"the http(s) URL to fetch"`
	MaxChars int    `json:"max_chars,omitempty" jsonschema:"maximum characters of text to return (default 20000)"`
}

func (w webFetch) tool() tools.Tool {
	return tools.MustNew("web_fetch", "Fetch a public web page or text/JSON resource over http(s) and return it as readable text. Internal, private and metadata addresses are refused.",
		func(ctx context.Context, c tools.Call, a fetchArgs) (tools.Result, error) {
			if strings.TrimSpace(a.URL) == "" {
				return tools.ErrorResult("url is required"), nil
			}
			raw := strings.TrimSpace(a.URL)
			if !strings.Contains(raw, "://") {
				raw = "https://" + raw
			}
			res, err := w.guard.Fetch(ctx, raw, netguard.FetchOptions{MaxBytes: w.maxBytes, Timeout: w.timeout})
			if err != nil {
				if errors.Is(err, netguard.ErrBlocked) {
					return tools.ErrorResult("web_fetch refused %s: %v", a.URL, err), nil
				}
				return tools.ErrorResult("web_fetch %s failed: %v", a.URL, err), nil
			}
			limit := a.MaxChars
			if limit <= 0 {
				limit = defaultFetchChars
			}
			limit = min(limit, maxFetchChars)
			title, text, kind, err := toText(res)
			if err != nil {
				return tools.ErrorResult("web_fetch %s: %v", res.URL, err), nil
			}
			runes := []rune(text)
			cut := len(runes) > limit
			if cut {
				text = string(runes[:limit])
			}
			var b strings.Builder
			fmt.Fprintf(&b, "URL: %s\nStatus: %d\n", res.URL, res.Status)
			if title != "" {
				fmt.Fprintf(&b, "Title: %s\n", title)
			}
			b.WriteString("\n")
			b.WriteString(text)
			switch {
			case cut:
				fmt.Fprintf(&b, "\n\n[truncated at %d characters of %d]", limit, len(runes))
			case res.Truncated:
				fmt.Fprintf(&b, "\n\n[download stopped at %d bytes; the page is longer]", len(res.Body))
			}
			r := tools.Result{Content: tools.TextResult(b.String()).Content, Details: details(map[string]any{
				"url": res.URL, "status": res.Status, "contentType": kind, "bytes": len(res.Body),
				"truncated": cut || res.Truncated})}
			r.IsError = res.Status < 200 || res.Status > 299
			return r, nil
		}, tools.Idempotent(), tools.WithKeywords("fetch", "url", "web", "http", "www.", "page", "link", "summarize", "网页", "链接", "打开", "网址", "网站", "总结", "摘要"), tools.WithSource("builtin"))
}

// toText converts a fetched body by content type (sniffed when absent).
func toText(res *netguard.FetchResult) (title, text, kind string, err error) {
	kind = res.ContentType
	if kind == "" {
		kind = http.DetectContentType(res.Body)
	}
	mt, _, _ := mime.ParseMediaType(kind)
	body := res.Body
	if !utf8.Valid(body) {
		body = bytes.ToValidUTF8(body, []byte("\uFFFD"))
	}
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		base, _ := url.Parse(res.URL)
		title, text = HTMLToText(bytes.NewReader(body), base)
		return title, text, mt, nil
	case strings.HasPrefix(mt, "text/"), mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"), mt == "application/javascript", mt == "application/x-yaml", mt == "application/yaml":
		return "", string(body), mt, nil
	}
	return "", "", mt, fmt.Errorf("unsupported content type %q (only text, HTML, JSON and XML are returned)", mt)
}

// SearchResult is one hit of a web search.
type SearchResult struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet,omitempty"`
}

// SearchBackend runs web searches for web_search. Implementations: SearxNG.
type SearchBackend interface {
	Search(ctx context.Context, query string, limit int) ([]SearchResult, error)
}

// SearxNG queries a SearxNG instance's JSON API (format=json must be enabled in its
// settings.yml). The instance is configured by the operator, so it is reached directly, not
// through the SSRF guard (it is usually on a private network).
type SearxNG struct {
	BaseURL string
	APIKey  string // sent as a Bearer token when set (for instances behind a proxy)
	Client  *http.Client
}

// Search implements SearchBackend.
func (s *SearxNG) Search(ctx context.Context, query string, limit int) ([]SearchResult, error) {
	u, err := url.Parse(strings.TrimRight(s.BaseURL, "/") + "/search")
	if err != nil {
		return nil, fmt.Errorf("searxng url: %w", err)
	}
	q := u.Query()
	q.Set("q", query)
	q.Set("format", "json")
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if s.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	cl := s.Client
	if cl == nil {
		cl = &http.Client{Timeout: 20 * time.Second}
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("searxng: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("searxng: HTTP %d (is format=json enabled in its settings?)", resp.StatusCode)
	}
	var body struct {
		Results []struct {
			Title   string `json:"title"`
			URL     string `json:"url"`
			Content string `json:"content"`
		} `json:"results"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 4<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("searxng: decode: %w", err)
	}
	var out []SearchResult
	for _, r := range body.Results {
		if len(out) == limit {
			break
		}
		out = append(out, SearchResult{Title: r.Title, URL: r.URL, Snippet: r.Content})
	}
	return out, nil
}

// NewSearchBackend builds the backend named by ai.agent.webSearch; (nil, nil) when none is
// configured, which leaves web_search out of the tool list.
func NewSearchBackend(c config.WebSearch) (SearchBackend, error) {
	switch strings.ToLower(c.Backend) {
	case "":
		return nil, nil
	case "searxng", "searx":
		if c.URL == "" {
			return nil, fmt.Errorf("ai.agent.webSearch.url is required for backend searxng")
		}
		return &SearxNG{BaseURL: c.URL, APIKey: c.APIKey}, nil
	}
	return nil, fmt.Errorf("ai.agent.webSearch.backend %q: want searxng", c.Backend)
}

type searchArgs struct {
	Query string `json:"query" jsonschema:"what to search for"`
	Limit int    `json:"limit,omitempty" jsonschema:"number of results (default 5, at most 20)"`
}

func webSearchTool(be SearchBackend) tools.Tool {
	return tools.MustNew("web_search", "Search the web. Returns titles, URLs and snippets; use web_fetch to read a result.",
		func(ctx context.Context, c tools.Call, a searchArgs) (tools.Result, error) {
			if strings.TrimSpace(a.Query) == "" {
				return tools.ErrorResult("query is required"), nil
			}
			n := a.Limit
			if n <= 0 {
				n = 5
			}
			n = min(n, 20)
			hits, err := be.Search(ctx, a.Query, n)
			if err != nil {
				return tools.ErrorResult("web_search failed: %v", err), nil
			}
			if len(hits) == 0 {
				return tools.TextResult("no results for " + a.Query), nil
			}
			var b strings.Builder
			for i, h := range hits {
				fmt.Fprintf(&b, "%d. %s\n   %s\n", i+1, h.Title, h.URL)
				if h.Snippet != "" {
					fmt.Fprintf(&b, "   %s\n", collapse(h.Snippet))
				}
			}
			return tools.Result{Content: tools.TextResult(b.String()).Content, Details: details(hits)}, nil
		}, tools.Idempotent(), tools.WithKeywords("search", "web", "google", "look up", "latest", "news", "搜索", "查询", "新闻", "搜一下", "查一下", "最新"), tools.WithSource("builtin"))
}
