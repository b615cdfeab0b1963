package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store/transcript"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Search limits.
const (
	DefaultSearchLimit = 10
	MaxSearchLimit     = transcript.MaxLimit
)

// Searcher is what the search service needs of an archive (*transcript.DB).
type Searcher interface {
	Search(ctx context.Context, q transcript.Query) ([]transcript.Row, error)
}

// searchTimeout bounds one search.
const searchTimeout = 10 * time.Second

// ServeSearch serves the transcript search (events.SubjectTranscriptSearch) from s on nc until the returned service is stopped.
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
			body, _ := json.Marshal(events.TranscriptSearchResponse{Rows: []transcript.Row{}, Error: err.Error()})
			if rerr := req.Error(code, err.Error(), body); rerr != nil {
				log.Warn("egress: search: respond", "err", rerr)
			}
			return
		}
		if rerr := req.RespondJSON(resp); rerr != nil {
			log.Warn("egress: search: respond", "err", rerr)
		}
	})
	if err := svc.AddEndpoint("search", handler, micro.WithEndpointSubject(events.SubjectTranscriptSearch)); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("egress: search endpoint: %w", err)
	}
	return svc, nil
}

func search(s Searcher, data []byte) (events.TranscriptSearchResponse, string, error) {
	var req events.TranscriptSearchRequest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return events.TranscriptSearchResponse{}, "400", fmt.Errorf("bad search request: %v", err)
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
		return events.TranscriptSearchResponse{}, "400", fmt.Errorf("bad search request: %s required", strings.Join(missing, ", "))
	}
	if req.Limit < 0 {
		return events.TranscriptSearchResponse{}, "400", errors.New("bad search request: limit must not be negative")
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
		return events.TranscriptSearchResponse{}, code, fmt.Errorf("search: %w", err)
	}
	if rows == nil {
		rows = []transcript.Row{}
	}
	return events.TranscriptSearchResponse{Rows: rows}, "", nil
}
