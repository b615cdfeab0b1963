package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/store/transcript"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

func seedTranscripts(t *testing.T, db *transcript.DB) {
	t.Helper()
	base := time.Now().Add(-time.Hour).UnixMilli()
	rows := []transcript.Row{
		{MessageID: "m1", Platform: "webhook", BotID: "b1", SceneID: "g1", SceneType: "group", SenderID: "u1", SenderName: "Ann", Direction: transcript.Inbound, Body: "shall we deploy on Friday?", Time: base},
		{MessageID: "t1-0", Platform: "webhook", BotID: "b1", SceneID: "g1", SceneType: "group", SenderID: "b1", Direction: transcript.Outbound, Body: "Deploying on Friday is risky.", Time: base + 1000},
		{MessageID: "m2", Platform: "webhook", BotID: "b1", SceneID: "g1", SceneType: "group", SenderID: "u2", Direction: transcript.Inbound, Body: "lunch?", Time: base + 2000},
		{MessageID: "m3", Platform: "webhook", BotID: "b1", SceneID: "other", SceneType: "group", SenderID: "u3", Direction: transcript.Inbound, Body: "deploy elsewhere", Time: base + 3000},
	}
	if _, err := db.Insert(context.Background(), rows...); err != nil {
		t.Fatal(err)
	}
}

func TestSearchRoundTrip(t *testing.T) {
	srv := natstest.New(t)
	db, err := transcript.Open(filepath.Join(t.TempDir(), "transcripts.db"), &transcript.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	seedTranscripts(t, db)
	o := fastOptions(srv, testConfig(nil), t)
	o.Transcripts = db
	start(t, o)

	ctx := context.Background()
	tests := []struct {
		name    string
		req     events.TranscriptSearchRequest
		wantIDs []string
		wantErr bool
	}{
		{"keyword, both directions, newest first", events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1", Keyword: "DEPLOY"}, []string{"t1-0", "m1"}, false},
		{"limit", events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1", Keyword: "deploy", Limit: 1}, []string{"t1-0"}, false},
		{"latest without keyword", events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1"}, []string{"m2", "t1-0", "m1"}, false},
		{"other scene", events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "other", Keyword: "deploy"}, []string{"m3"}, false},
		{"no match", events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1", Keyword: "zebra"}, nil, false},
		{"missing scene", events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1"}, nil, true},
		{"negative limit", events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1", Limit: -1}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := askSearch(ctx, srv.NC, tc.req)
			if tc.wantErr {
				if !errors.Is(err, errSearch) {
					t.Fatalf("err = %v, want ErrSearch", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range resp.Rows {
				ids = append(ids, r.MessageID)
			}
			if len(ids) != len(tc.wantIDs) {
				t.Fatalf("rows %v, want %v", ids, tc.wantIDs)
			}
			for i := range ids {
				if ids[i] != tc.wantIDs[i] {
					t.Fatalf("rows %v, want %v", ids, tc.wantIDs)
				}
			}
		})
	}

	// A malformed request body gets a 400 error reply, not silence.
	msg, err := srv.NC.Request(events.SubjectTranscriptSearch, []byte("{nope"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("malformed request: headers %v body %s", msg.Header, msg.Data)
	}
}

func TestSearchArchiveFromDataDir(t *testing.T) {
	srv := natstest.New(t)
	dir := t.TempDir()
	o := fastOptions(srv, testConfig(nil), t)
	o.DataDir = dir
	h := start(t, o)
	if h.Transcripts() == nil {
		t.Fatal("no archive opened from DataDir")
	}
	seedTranscripts(t, h.Transcripts())
	resp, err := askSearch(context.Background(), srv.NC, events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1", Keyword: "lunch"})
	if err != nil || len(resp.Rows) != 1 {
		t.Fatalf("search: %v %+v", err, resp)
	}
	if err := h.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Stop closed the archive and the service.
	if _, err := h.Transcripts().Count(context.Background(), transcript.Scene{Platform: "webhook", BotID: "b1", SceneID: "g1"}); !errors.Is(err, transcript.ErrClosed) {
		t.Fatalf("archive still open after Stop: %v", err)
	}
	if _, err := askSearch(context.Background(), srv.NC, events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1"}); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("search after Stop: %v", err)
	}
}

// TestArchiveEndToEnd: an inbound message on IM_IN and a reply delivered by egress both land
// in the archive egress runs, and chat_history's search finds them.
func TestArchiveEndToEnd(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, nil)
	o := fastOptions(srv, testConfig(cb), t)
	o.DataDir = t.TempDir()
	start(t, o)

	in := events.IMMessage{
		Platform: "webhook", Bot: "b1", MessageID: "m1",
		Scene:   events.Scene{Type: "group", ID: "g1"},
		Sender:  events.Sender{ID: "u1", Name: "Ann"},
		Content: events.Segments{events.TextSeg("when is the release?")},
	}
	m, err := events.NewMsg(events.IMInSubject(in.SessionKey()), events.New(in))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	out := outbound("turnH-0")
	out.Content = events.Segments{events.TextSeg("The release is on Friday.")}
	publish(t, srv.JS, out, "")

	var rows []transcript.Row
	testwait.Eventually(t, 0, func() error {
		resp, err := askSearch(context.Background(), srv.NC, events.TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1", Keyword: "release"})
		if err != nil {
			t.Fatal(err)
		}
		rows = resp.Rows
		return testwait.Want(len(rows) == 2, "both rows archived")
	})
	if rows[0].Direction != transcript.Outbound || rows[0].MessageID == "" || rows[1].Direction != transcript.Inbound || rows[1].SenderName != "Ann" {
		t.Fatalf("rows = %+v", rows)
	}
}

var errSearch = errors.New("search answered with an error")

// askSearch asks the transcript search over nc the way a client does (pkg/toolworker's
// NATSHistory is the production client; pkg/app tests the two together).
func askSearch(ctx context.Context, nc *nats.Conn, req events.TranscriptSearchRequest) (*events.TranscriptSearchResponse, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, events.SubjectTranscriptSearch, data)
	if err != nil {
		return nil, err
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		return nil, fmt.Errorf("%w: %s", errSearch, desc)
	}
	var resp events.TranscriptSearchResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
