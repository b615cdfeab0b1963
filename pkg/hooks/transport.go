package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/webhook"
)

// maxAnswer bounds a hook's answer (context.transform answers carry a whole context).
const maxAnswer = 16 << 20

// HeaderEvent carries the event name on HTTP and NATS requests, for routing without parsing.
const HeaderEvent = "Agentbus-Hook-Event"

// Error headers of a NATS micro service's error response.
const (
	headerServiceError     = "Nats-Service-Error"
	headerServiceErrorCode = "Nats-Service-Error-Code"
)

// sign returns the Standard Webhooks headers of body, or none without a secret.
func sign(h *hook, ev *Event, body []byte) (http.Header, error) {
	if h.secret == "" {
		return http.Header{}, nil
	}
	hdr, err := webhook.SignStandard(h.secret, ev.ID, time.Now(), body)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return hdr, nil
}

func (r *Runner) callHTTP(ctx context.Context, h *hook, ev *Event) (Result, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return Result{}, err
	}
	hdr, err := sign(h, ev, body)
	if err != nil {
		return Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return Result{}, err
	}
	req.Header = hdr
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderEvent, ev.Event)
	resp, err := r.o.HTTPClient.Do(req)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return Result{}, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return Result{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, snippet(raw))
	}
	return decodeAnswer(raw)
}

func (r *Runner) callNATS(ctx context.Context, h *hook, ev *Event) (Result, error) {
	if r.o.NC == nil {
		return Result{}, fmt.Errorf("no NATS connection for subject %s", h.subject)
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return Result{}, err
	}
	hdr, err := sign(h, ev, body)
	if err != nil {
		return Result{}, err
	}
	m := &nats.Msg{Subject: h.subject, Data: body, Header: nats.Header(hdr)}
	m.Header.Set(HeaderEvent, ev.Event)
	resp, err := r.o.NC.RequestMsgWithContext(ctx, m)
	if err != nil {
		return Result{}, fmt.Errorf("request %s: %w", h.subject, err)
	}
	if code := resp.Header.Get(headerServiceErrorCode); code != "" {
		return Result{}, fmt.Errorf("service error %s: %s", code, resp.Header.Get(headerServiceError))
	}
	return decodeAnswer(resp.Data)
}

// decodeAnswer reads a hook's answer; an empty body is continue.
func decodeAnswer(raw []byte) (Result, error) {
	if len(raw) > maxAnswer {
		return Result{}, fmt.Errorf("answer over %d bytes", maxAnswer)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return Result{Action: Continue}, nil
	}
	var res Result
	if err := json.Unmarshal(raw, &res); err != nil {
		return Result{}, fmt.Errorf("answer is not a hook result: %w (%s)", err, snippet(raw))
	}
	return res, nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// callFunc runs an in-process hook; a hook that ignores its ctx is abandoned at the timeout
// (its goroutine runs on, its answer is dropped).
func callFunc(ctx context.Context, h *hook, ev *Event) (Result, error) {
	// The function gets its own copy of the event, so that an abandoned call cannot race the
	// chain's next steps.
	cp := *ev
	cp.Data = cloneData(ev.Data)
	type answer struct {
		res Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- answer{err: fmt.Errorf("panic: %v", v)}
			}
		}()
		res, err := h.fn(ctx, &cp)
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		return a.res, a.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// cloneData copies data through JSON, as a remote hook would see it.
func cloneData(d map[string]any) map[string]any {
	raw, err := json.Marshal(d)
	if err != nil {
		return map[string]any{}
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}
