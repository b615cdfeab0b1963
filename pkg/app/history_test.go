package app

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/store/transcript"
	"github.com/agentbus/agentbus/pkg/toolworker"
)

// TestChatHistoryThroughEgress checks the transcript search contract (pkg/events
// TranscriptSearchRequest/Response) between the two roles that speak it: the client the
// chat_history tool uses (toolworker.NATSHistory) against egress's service over a real archive.
func TestChatHistoryThroughEgress(t *testing.T) {
	srv := natstest.New(t)
	ctx := context.Background()
	db, err := transcript.Open(filepath.Join(t.TempDir(), "transcripts.db"), &transcript.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, r := range []transcript.Row{
		{MessageID: "m1", Platform: "webhook", BotID: "b1", SceneID: "g1", SceneType: "group", SenderID: "u1", SenderName: "Ann", Direction: transcript.Inbound, Body: "we deploy on friday", Time: 1000},
		{MessageID: "t1-0", Platform: "webhook", BotID: "b1", SceneID: "g1", SceneType: "group", SenderID: "b1", Direction: transcript.Outbound, Body: "Noted: deploy on Friday.", Time: 2000},
		{MessageID: "m2", Platform: "webhook", BotID: "b1", SceneID: "g2", SceneType: "group", SenderID: "u2", Direction: transcript.Inbound, Body: "deploy of another group", Time: 3000},
	} {
		if _, err := db.Insert(ctx, r); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	svc, err := egress.ServeSearch(srv.NC, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()

	client := toolworker.NATSHistory{NC: srv.NC}
	tests := []struct {
		name    string
		scene   string
		keyword string
		limit   int
		want    []string
		wantErr bool
	}{
		{"newest first, both directions", "g1", "deploy", 10, []string{"t1-0", "m1"}, false},
		{"limit", "g1", "deploy", 1, []string{"t1-0"}, false},
		{"never crosses scenes", "g2", "", 10, []string{"m2"}, false},
		{"bad request is an error, not silence", "", "x", 10, nil, true},
		{"negative limit", "g1", "", -1, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := client.Search(ctx, "webhook", "b1", tc.scene, tc.keyword, tc.limit)
			if tc.wantErr {
				if !errors.Is(err, toolworker.ErrHistoryUnavailable) {
					t.Fatalf("err = %v, want ErrHistoryUnavailable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range rows {
				ids = append(ids, r.MessageID)
			}
			if len(ids) != len(tc.want) {
				t.Fatalf("rows %v, want %v", ids, tc.want)
			}
			for i := range ids {
				if ids[i] != tc.want[i] {
					t.Fatalf("rows %v, want %v", ids, tc.want)
				}
			}
		})
	}
}
