package openai

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/retry"
)

// The call is made with net/http directly, not through the SDK's request pipeline: the body
// is ours already (encode.go), and the SDK's request config (its options, origin checks,
// middleware chain and the sjson pass that sets "stream" again on the whole body) and its
// reflective decoding of every chunk cost agentbus up about 9 % of its CPU per tool turn
// from outside (issue 40). What goes on the wire is what the SDK sent: the same URL, body and
// auth header; net/http already keeps credentials on their origin across redirects.

// chatURL is base's chat completions endpoint, resolved as the SDK resolves it: a base path
// without a trailing slash gets one, then "chat/completions" is taken relative to it (so a
// query on the base is not kept).
func chatURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("base URL %q: %w", base, err)
	}
	if u.Path != "" && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.ResolveReference(&url.URL{Path: "chat/completions"}).String(), nil
}

// userAgent names the client to the server (the SDK sent its own name).
const userAgent = "agentbus (openai-completions)"

// post sends the request, retried as package retry says, and returns the accepted response
// (status < 400), whose body the caller closes.
func (p *Provider) post(ctx context.Context, model *llm.Model, opts *llm.StreamOptions, body []byte) (*http.Response, error) {
	base := model.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := chatURL(base)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json") // what the SDK sent, for servers that look
	h.Set("User-Agent", userAgent)
	if opts.APIKey != "" {
		h.Set("Authorization", "Bearer "+opts.APIKey)
	}
	// Provider, then model, then call headers: a later one wins, an Authorization among them
	// replaces the bearer key.
	for _, hs := range [...]map[string]string{p.headers, model.Headers, opts.Headers} {
		for k, v := range hs {
			h.Set(k, v)
		}
	}
	hc := p.httpClient
	if opts.HTTPClient != nil {
		hc = opts.HTTPClient
	}
	policy := p.policy
	policy.MaxDelay = opts.MaxRetryDelay
	return retry.Do(ctx, policy, req, hc.Do)
}

// maxEventLine bounds one line of the event stream (the SDK's bound: 32 MiB).
const maxEventLine = bufio.MaxScanTokenSize << 9

// sseReader reads a text/event-stream as the SDK's decoder did: "data:" lines are joined
// (each followed by a newline) until an empty line dispatches the event; "event:" names it;
// comments and other fields are skipped; an event not ended by an empty line before EOF is
// dropped.
type sseReader struct {
	scn   *bufio.Scanner
	event []byte // the current event's name
	data  []byte // the current event's data, reused from one event to the next
	err   error
}

func newSSEReader(r io.Reader) *sseReader {
	scn := bufio.NewScanner(r)
	scn.Buffer(make([]byte, 0, 4096), maxEventLine)
	return &sseReader{scn: scn}
}

// next returns the next event's name and data (valid until the following call), or ok false
// at the end of the stream (err tells why, nil at EOF).
func (s *sseReader) next() (event, data []byte, ok bool) {
	s.event, s.data = s.event[:0], s.data[:0]
	for s.scn.Scan() {
		line := s.scn.Bytes()
		if len(line) == 0 {
			if len(s.data) == 0 {
				s.event = s.event[:0]
				continue
			}
			return s.event, s.data, true
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "event":
			s.event = append(s.event[:0], value...)
		case "data":
			s.data = append(s.data, value...)
			s.data = append(s.data, '\n')
		}
	}
	s.err = s.scn.Err()
	return nil, nil, false
}

// streamError is an event whose data has a top-level "error": the server failed mid-stream.
func streamError(data []byte) error {
	e := gjson.GetBytes(data, "error")
	if !e.Exists() {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrStreamError, retry.ErrorMessage(data))
}
