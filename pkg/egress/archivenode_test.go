package egress

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/store/transcript"
)

func TestArchiveNode(t *testing.T) {
	fresh := regexp.MustCompile(`^a[0-9a-f]{12}$`)
	cases := []struct {
		name     string
		db, node string // files present before the call ("" = absent)
		want     string // "fresh" = a newly made name
		wantErr  bool
	}{
		{name: "new archive", want: "fresh"},
		{name: "archive with its name", db: "x", node: "a0123456789ab\n", want: "a0123456789ab"},
		{name: "archive from an older build", db: "x", want: legacyNode},
		{name: "archive deleted, name left", node: "a0123456789ab\n", want: "fresh"},
		{name: "unreadable name", db: "x", node: "no spaces allowed", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.db != "" {
				if err := os.WriteFile(filepath.Join(dir, transcriptsFile), []byte(tc.db), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.node != "" {
				if err := os.WriteFile(filepath.Join(dir, nodeFile), []byte(tc.node), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := archiveNode(dir)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "fresh" {
				if !fresh.MatchString(got) || got == "a0123456789ab" {
					t.Fatalf("got %q, want a new name", got)
				}
			} else if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			kept, err := os.ReadFile(filepath.Join(dir, nodeFile))
			if err != nil || string(kept) != got+"\n" {
				t.Fatalf("%s holds %q (%v), want %q", nodeFile, kept, err, got)
			}
		})
	}
}

// Two egress replicas with data directories of their own each archive every message, without
// any configuration; a restart keeps its consumers, so nothing is archived twice.
func TestEgressReplicasEachKeepWholeArchive(t *testing.T) {
	srv := natstest.New(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	var hs []*Handle
	for _, d := range dirs {
		o := fastOptions(srv, testConfig(nil), t)
		o.DataDir = d
		hs = append(hs, start(t, o))
	}
	publishInbound := func(id string) {
		t.Helper()
		in := events.IMMessage{Platform: "webhook", Bot: "b1", MessageID: id, Scene: events.Scene{Type: "group", ID: "g1"},
			Sender: events.Sender{ID: "u1", Name: "Ann"}, Content: events.Segments{events.TextSeg("message " + id)}}
		m, err := events.NewMsg(events.IMInSubject(in.SessionKey()), events.New(in))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.JS.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	scene := transcript.Scene{Platform: "webhook", BotID: "b1", SceneID: "g1"}
	count := func(h *Handle) int {
		n, err := h.Transcripts().Count(context.Background(), scene)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		publishInbound(id)
	}
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(count(hs[0]) == 3 && count(hs[1]) == 3, "both archives hold all three")
	})

	// The first replica restarts: same archive, same name, and it catches up on what came in
	// meanwhile without storing anything twice.
	if err := hs[0].Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	publishInbound("m4")
	o := fastOptions(srv, testConfig(nil), t)
	o.DataDir = dirs[0]
	again := start(t, o)
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(count(again) == 4 && count(hs[1]) == 4, "the restarted archive catches up")
	})
	names := map[string]bool{}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, nodeFile))
		if err != nil {
			t.Fatal(err)
		}
		names[string(b)] = true
	}
	if len(names) != 2 {
		t.Fatalf("the two archives share a node name: %v", names)
	}
}
