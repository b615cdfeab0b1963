package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
)

// TestProviderErrorEchoingKeyStaysOut: an upstream whose 401 body echoes the Authorization
// header must not put the key into chat or any store (AGENT_CTX, AGENT_EVENTS, IM_OUT, IM_SENT,
// the transcript files). A non-master gets a short text, a master the redacted error.
func TestProviderErrorEchoingKeyStaysOut(t *testing.T) {
	const key = "sk-e2e-secret-0123456789abcdef"
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		return fakeopenai.Reply{Status: 401, ErrorMessage: "invalid credentials; you sent Authorization: " + r.Header.Get("Authorization") +
			" (key " + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + ")"}
	}, pipelineOpts{apiKey: key})

	tests := []struct {
		name   string
		m      msg
		want   string // reply must contain
		forbid string // reply must not contain
	}{
		{"stranger", private("sec-1", "mallory", "hi"), "Please try again later", "401"},
		{"master", private("sec-2", master, "hi"), "[REDACTED]", "sk-e2e"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl.post(tt.m)
			rs := pl.replies(i + 1)
			got := rs[len(rs)-1].Text()
			for _, r := range rs {
				if r.Scene.ID == tt.m.sceneID {
					got = r.Text()
				}
			}
			if !strings.Contains(got, tt.want) || strings.Contains(got, tt.forbid) || strings.Contains(got, key) {
				t.Errorf("reply to %s = %q, want it to contain %q and not %q or the key", tt.name, got, tt.want, tt.forbid)
			}
		})
	}
	// Let egress write its receipts and transcripts.
	testwait.Eventually(t, waitMargin, func() error {
		n := pl.streamMsgs("IM_SENT")
		return testwait.Want(n >= 2, "%d receipts in IM_SENT, want 2", n)
	})
	for _, stream := range []string{"AGENT_CTX", "AGENT_EVENTS", "IM_OUT", "IM_SENT", "IM_IN", "SESSION_IN"} {
		n := pl.scanStream(stream, key)
		if n > 0 {
			t.Errorf("%s: %d messages contain the API key", stream, n)
		}
	}
	if pl.streamMsgs("AGENT_EVENTS") == 0 {
		t.Error("AGENT_EVENTS is empty: the scan proves nothing")
	}
	// The transcript archive (bbolt) and anything else in the data directory.
	dir := filepath.Dir(pl.p.Config.NATS.StoreDir)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".db") {
			return nil
		}
		b, rerr := os.ReadFile(path)
		if rerr == nil && bytes.Contains(b, []byte(key)) {
			return fmt.Errorf("%s contains the API key", path)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// scanStream counts the messages of stream whose data or headers contain s.
func (pl *pipeline) scanStream(name, s string) int {
	pl.t.Helper()
	ctx := context.Background()
	st, err := pl.p.JS.Stream(ctx, name)
	if err != nil {
		pl.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		pl.t.Fatal(err)
	}
	n := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		hit := bytes.Contains(m.Data, []byte(s))
		for _, vs := range m.Header {
			for _, v := range vs {
				hit = hit || strings.Contains(v, s)
			}
		}
		if hit {
			n++
		}
	}
	return n
}
