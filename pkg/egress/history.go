package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/store/transcript"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// SearchSubject is the NATS request/reply subject of the transcript search (the chat_history
// tool's backend). It is served by a NATS micro service "agentbus-transcripts" (endpoint
// "search", queue group "transcripts") on every egress that holds an archive, so any one of
// them answers; `nats micro info agentbus-transcripts` shows its stats.
const SearchSubject = "transcripts.search"

// Search limits.
const (
	DefaultSearchLimit = 10
	MaxSearchLimit     = transcript.MaxLimit
)

// SearchRequest is the JSON request on SearchSubject:
//
//	{"platform":"webhook","bot":"b1","scene":"g1","keyword":"deploy","limit":10}
//
// Platform, Bot and Scene (the scene id) are required: a search never crosses scenes.
// Keyword is a case-insensitive substring of the message text ("" = the latest rows). Limit
// defaults to 10 and is capped at 1000.
type SearchRequest struct {
	Platform string `json:"platform"`
	Bot      string `json:"bot"`
	Scene    string `json:"scene"`
	Keyword  string `json:"keyword,omitempty"`
	Limit    int    `json:"limit,omitempty"`
}

// SearchResponse is the JSON reply: the matching transcript rows, newest first, both
// directions (inbound user messages and outbound bot replies), each with the seed's columns
// (message_id, platform, bot_id, scene_id, scene_type, sender_id, sender_name, sender_role,
// direction, body, media_json, time in Unix ms).
//
// On failure the reply carries the micro error headers (Nats-Service-Error,
// Nats-Service-Error-Code: 400 for a bad request, 500 otherwise) and a body {"error":"..."}.
type SearchResponse struct {
	Rows  []transcript.Row `json:"rows"`
	Error string           `json:"error,omitempty"`
}

// Searcher is what the search service needs of an archive (*transcript.DB).
type Searcher interface {
	Search(ctx context.Context, q transcript.Query) ([]transcript.Row, error)
}

// searchTimeout bounds one search.
const searchTimeout = 10 * time.Second

// ServeSearch serves SearchSubject from s on nc until the returned service is stopped.
func ServeSearch(nc *nats.Conn, s Searcher, log *slog.Logger) (micro.Service, error) {
	if log == nil {
		log = slog.Default()
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "agentbus-transcripts",
		Version:     "1.0.0",
		Description: "agentbus transcript archive: keyword search for chat_history",
		QueueGroup:  "transcripts",
	})
	if err != nil {
		return nil, fmt.Errorf("egress: search service: %w", err)
	}
	handler := micro.HandlerFunc(func(req micro.Request) {
		resp, code, err := search(s, req.Data())
		if err != nil {
			body, _ := json.Marshal(SearchResponse{Rows: []transcript.Row{}, Error: err.Error()})
			if rerr := req.Error(code, err.Error(), body); rerr != nil {
				log.Warn("egress: search: respond", "err", rerr)
			}
			return
		}
		if rerr := req.RespondJSON(resp); rerr != nil {
			log.Warn("egress: search: respond", "err", rerr)
		}
	})
	if err := svc.AddEndpoint("search", handler, micro.WithEndpointSubject(SearchSubject)); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("egress: search endpoint: %w", err)
	}
	return svc, nil
}

func search(s Searcher, data []byte) (SearchResponse, string, error) {
	var req SearchRequest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return SearchResponse{}, "400", fmt.Errorf("bad search request: %v", err)
	}
	var missing []string
	if req.Platform == "" {
		missing = append(missing, "platform")
	}
	if req.Bot == "" {
		missing = append(missing, "bot")
	}
	if req.Scene == "" {
		missing = append(missing, "scene")
	}
	if len(missing) > 0 {
		return SearchResponse{}, "400", fmt.Errorf("bad search request: %s required", strings.Join(missing, ", "))
	}
	if req.Limit < 0 {
		return SearchResponse{}, "400", errors.New("bad search request: limit must not be negative")
	}
	if req.Limit == 0 {
		req.Limit = DefaultSearchLimit
	}
	if req.Limit > MaxSearchLimit {
		req.Limit = MaxSearchLimit
	}
	ctx, cancel := context.WithTimeout(context.Background(), searchTimeout)
	defer cancel()
	rows, err := s.Search(ctx, transcript.Query{
		Scene:   transcript.Scene{Platform: req.Platform, BotID: req.Bot, SceneID: req.Scene},
		Keyword: req.Keyword,
		Limit:   req.Limit,
	})
	if err != nil {
		code := "500"
		if errors.Is(err, transcript.ErrInvalidQuery) {
			code = "400"
		}
		return SearchResponse{}, code, fmt.Errorf("search: %w", err)
	}
	if rows == nil {
		rows = []transcript.Row{}
	}
	return SearchResponse{Rows: rows}, "", nil
}

// Search asks the transcript service (any egress holding an archive) over nc. An error answer
// is returned as an error wrapping ErrSearch with the service's description; no responder is
// nats.ErrNoResponders.
func Search(ctx context.Context, nc *nats.Conn, req SearchRequest) (*SearchResponse, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, searchTimeout)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, SearchSubject, data)
	if err != nil {
		return nil, fmt.Errorf("transcript search: %w", err)
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		return nil, fmt.Errorf("%w: %s (code %s)", ErrSearch, desc, msg.Header.Get(micro.ErrorCodeHeader))
	}
	var resp SearchResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("%w: bad reply: %v", ErrSearch, err)
	}
	if resp.Error != "" {
		return nil, fmt.Errorf("%w: %s", ErrSearch, resp.Error)
	}
	return &resp, nil
}
