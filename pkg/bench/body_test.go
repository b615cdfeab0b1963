package bench

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/agentbus/agentbus/pkg/webhook"
)

// TestInboundBody checks the load generator's hand-built body against json.Marshal of the
// webhook.Inbound it stands for, and that the webhook's parser reads it.
func TestInboundBody(t *testing.T) {
	cases := []struct {
		id, scene string
		session   int
		text      string
	}{
		{"0a1b2c3d-r1-s0-m0", "s0a1b2c3d-0", 0, "hello 0"},
		{"r12-s199-m19", "s199", 199, ToolName + " 19"},
		{"odd \"id\"", "s\"3\"", 3, "quotes \" and \\ backslash"},
		{"x", "s-1", 7, "html <b>&</b>, tab\t, 中文, \u2028"},
	}
	for _, tc := range cases {
		want, err := json.Marshal(webhook.Inbound{
			ID:      tc.id,
			Scene:   webhook.Scene{Type: "private", ID: tc.scene},
			Sender:  webhook.Sender{ID: "u" + strconv.Itoa(tc.session), Name: "Bench " + strconv.Itoa(tc.session)},
			Content: []webhook.Segment{{Type: "text", Data: map[string]any{"text": tc.text}}},
			Time:    1764000000123,
		})
		if err != nil {
			t.Fatal(err)
		}
		got := inboundBody(tc.id, tc.scene, tc.session, tc.text, 1764000000123)
		if !bytes.Equal(got, want) {
			t.Errorf("body\n got %s\nwant %s", got, want)
		}
		in, err := webhook.ParseInbound(got)
		if err != nil || in.ID != tc.id {
			t.Errorf("ParseInbound(%s) = %+v, %v", got, in, err)
		}
	}
}
