package matrix_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im/matrix"
	"github.com/agentbus/agentbus/pkg/im/matrix/matrixtest"
)

// TestCardOnTheWire (issue 39): a card part is one m.text event with an
// org.matrix.custom.html formatted_body (title, text, fields, buttons as links or [label])
// in which model text is escaped, the plain text as body, and mentions of nobody.
func TestCardOnTheWire(t *testing.T) {
	fake := matrixtest.New(t, fakeBot, fakeToken)
	bot := config.MatrixBot{ID: "m1", Homeserver: fake.URL(), UserID: fakeBot, AccessToken: fakeToken, Preview: "off"}
	s, err := matrix.NewSender([]config.MatrixBot{bot}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	card := events.Card{Title: "Deploy <script>alert(1)</script>?", Text: "Staging is green.\n@room beware",
		Fields:  []events.CardField{{Name: "env", Value: `prod & "eu"`}},
		Buttons: []events.CardButton{{Label: "Deploy", Value: "deploy v1.4"}, {Label: "Change<log>", URL: `https://example.com/c?a=1&b="2"`}}}
	out := events.Outbound{OutID: "t1-1", Turn: "t1", Part: 1, Platform: matrix.Platform, Bot: "m1",
		Scene: events.Scene{Type: "group", ID: "!room:fake.test"}, Content: events.Segments{events.CardSeg(card)}, Final: true}
	if _, err := s.Send(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	sent := fake.Sent("!room:fake.test")
	if len(sent) != 1 {
		t.Fatalf("sent %d events, want 1: %v", len(sent), sent)
	}
	want := map[string]any{
		"msgtype": "m.text",
		"body":    "Deploy <script>alert(1)</script>?\nStaging is green.\n@room beware\nenv: prod & \"eu\"\n[Deploy]\n[Change<log>] https://example.com/c?a=1&b=\"2\"",
		"format":  "org.matrix.custom.html",
		"formatted_body": "<p><strong>Deploy &lt;script&gt;alert(1)&lt;/script&gt;?</strong></p><p>Staging is green.<br>@room beware</p>" +
			"<ul><li><strong>env:</strong> prod &amp; &#34;eu&#34;</li></ul>" +
			`<p><code>[Deploy]</code> · <a href="https://example.com/c?a=1&amp;b=&#34;2&#34;">Change&lt;log&gt;</a></p>`,
		"m.mentions": map[string]any{},
	}
	if !reflect.DeepEqual(sent[0], want) {
		t.Fatalf("card event\n got %v\nwant %v", sent[0], want)
	}
}
