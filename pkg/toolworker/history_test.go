package toolworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store/transcript"
)

// serveTranscripts answers events.SubjectTranscriptSearch from a real archive the way the egress service does
// (request/response JSON, micro error headers on failure) and records the limits asked for.
func serveTranscripts(t *testing.T, nc *nats.Conn, db *transcript.DB) *[]int {
	t.Helper()
	var mu sync.Mutex
	limits := []int{}
	sub, err := nc.QueueSubscribe(events.SubjectTranscriptSearch, "transcripts", func(m *nats.Msg) {
		var req events.TranscriptSearchRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set(micro.ErrorHeader, "bad search request")
			reply.Header.Set(micro.ErrorCodeHeader, "400")
			_ = m.RespondMsg(reply)
			return
		}
		mu.Lock()
		limits = append(limits, req.Limit)
		mu.Unlock()
		rows, err := db.Search(context.Background(), transcript.Query{
			Scene: transcript.Scene{Platform: req.Platform, BotID: req.Bot, SceneID: req.Scene}, Keyword: req.Keyword, Limit: req.Limit})
		resp := events.TranscriptSearchResponse{Rows: rows}
		if err != nil {
			resp.Error = err.Error()
		}
		data, _ := json.Marshal(resp)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &limits
}

// TestChatHistoryThroughAStandIn runs the tool against a stand-in speaking the search protocol
// over a real bbolt archive; pkg/app's TestChatHistoryThroughEgress runs the same scenario
// against egress's own service with the client the tool uses.
func TestChatHistoryThroughAStandIn(t *testing.T) {
	historyScenario(t, func(t *testing.T, nc *nats.Conn, db *transcript.DB) {
		limits := serveTranscripts(t, nc, db)
		t.Cleanup(func() {
			for _, l := range *limits {
				if l < 1 || l > MaxHistoryLimit {
					t.Errorf("service asked for limit %d", l)
				}
			}
		})
	})
}

func historyScenario(t *testing.T, serve func(*testing.T, *nats.Conn, *transcript.DB)) {
	srv := newServer(t)
	ctx := context.Background()
	db, err := transcript.Open(filepath.Join(t.TempDir(), "transcripts.db"), &transcript.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli()
	row := func(scene, msgID, sender string, dir transcript.Direction, body string, minute int) transcript.Row {
		return transcript.Row{MessageID: msgID, Platform: testSK.Platform, BotID: testSK.Bot, SceneID: scene, SceneType: "group",
			SenderID: sender, SenderName: strings.ToUpper(sender), Direction: dir, Body: body, Time: base + int64(minute)*60_000}
	}
	rows := []transcript.Row{
		row("g1", "m1", "ann", transcript.Inbound, "we deploy on friday", 0),
		row("g1", "m2", "", transcript.Outbound, "Noted: deploy on Friday.", 1),
		row("g1", "m3", "bob", transcript.Inbound, "lunch?", 2),
		row("g2", "m4", "eve", transcript.Inbound, "secret deploy plan of another group", 3),
	}
	rows[1].SenderName = ""
	for i := range 60 {
		rows = append(rows, row("g1", fmt.Sprintf("n%d", i), "ann", transcript.Inbound, fmt.Sprintf("note %d", i), 10+i))
	}
	for _, r := range rows {
		if _, err := db.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	serve(t, srv.NC, db)
	startWorker(t, fastOpts(srv, mustRegistry(t, ChatHistoryTool(NATSHistory{NC: srv.NC})), "w1"))

	tc := newCall("chat_history", "h1", map[string]any{"keyword": "DEPLOY"})
	publishCall(t, srv.JS, tc, "")
	r := waitResult(t, srv.JS, testSK, "h1")
	want := "[2026-11-29 10:01] bot: Noted: deploy on Friday.\n[2026-11-29 10:00] ANN: we deploy on friday"
	if r.Data.IsError || text(r) != want {
		t.Fatalf("got %q\nwant %q", text(r), want)
	}

	publishCall(t, srv.JS, newCall("chat_history", "h2", nil), "")
	r = waitResult(t, srv.JS, testSK, "h2")
	if lines := strings.Split(text(r), "\n"); len(lines) != DefaultHistoryLimit || !strings.Contains(lines[0], "note 59") {
		t.Fatalf("latest: %d lines, first %q", len(lines), lines[0])
	}
	publishCall(t, srv.JS, newCall("chat_history", "h3", map[string]any{"keyword": "note", "limit": 500}), "")
	r = waitResult(t, srv.JS, testSK, "h3")
	// The schema caps limit at 50: an over-large limit is the model's error to fix.
	if !r.Data.IsError || !strings.Contains(text(r), "limit") {
		t.Fatalf("limit 500: %q", text(r))
	}
	publishCall(t, srv.JS, newCall("chat_history", "h4", map[string]any{"keyword": "note", "limit": 50}), "")
	if r = waitResult(t, srv.JS, testSK, "h4"); len(strings.Split(text(r), "\n")) != 50 {
		t.Fatalf("limit 50: %d lines", len(strings.Split(text(r), "\n")))
	}
	publishCall(t, srv.JS, newCall("chat_history", "h5", map[string]any{"keyword": "nothing like this"}), "")
	if r = waitResult(t, srv.JS, testSK, "h5"); r.Data.IsError || !strings.Contains(text(r), "No earlier messages") {
		t.Fatalf("no match: %q", text(r))
	}
}

func TestChatHistoryWithoutArchive(t *testing.T) {
	srv := newServer(t)
	startWorker(t, fastOpts(srv, mustRegistry(t, ChatHistoryTool(NATSHistory{NC: srv.NC})), "w1"))
	publishCall(t, srv.JS, newCall("chat_history", "x1", nil), "")
	r := waitResult(t, srv.JS, testSK, "x1")
	if !r.Data.IsError || !strings.Contains(text(r), "no transcript archive is answering") {
		t.Fatalf("got %q", text(r))
	}
}

func TestNATSHistoryErrors(t *testing.T) {
	srv := newServer(t)
	sub, err := srv.NC.Subscribe("test.search", func(m *nats.Msg) {
		switch string(m.Data[:1]) {
		default:
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set(micro.ErrorHeader, "bad search request: scene required")
			reply.Header.Set(micro.ErrorCodeHeader, "400")
			_ = m.RespondMsg(reply)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_, err = NATSHistory{NC: srv.NC, Subject: "test.search"}.Search(context.Background(), "p", "b", "s", "", 1)
	if !errors.Is(err, ErrHistoryUnavailable) || !strings.Contains(err.Error(), "scene required (code 400)") {
		t.Fatalf("err = %v", err)
	}
}

func TestFormatHistory(t *testing.T) {
	got := FormatHistory([]transcript.Row{
		{SenderID: "u9", Body: "multi\nline   text", Time: 0},
		{Direction: transcript.Inbound, MediaJSON: `[{"type":"image"}]`, Time: 60_000},
		{SenderName: "Long", Body: strings.Repeat("é", maxHistoryBody+10), Time: 0},
	})
	lines := strings.Split(got, "\n")
	if lines[0] != "[1970-01-01 00:00] u9: multi line text" || lines[1] != "[1970-01-01 00:01] unknown: [media]" ||
		!strings.HasSuffix(lines[2], "é…") || len([]rune(lines[2])) != len("[1970-01-01 00:00] Long: ")+maxHistoryBody+1 {
		t.Fatalf("got %q", got)
	}
}
