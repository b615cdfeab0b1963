package im_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

func TestVisible(t *testing.T) {
	tests := []struct {
		mode, text string
		limit      int
		want       string
	}{
		{"partial", "Hello wor", 100, "Hello wor"},
		{"partial", "  padded \n", 100, "padded"},
		{"block", "Hello wor", 100, ""},
		{"block", "First paragraph.\n\nSecond par", 100, "First paragraph."},
		{"block", "A.\n\nB.\n\nC", 100, "A.\n\nB."},
		{"partial", strings.Repeat("x", 5000), 4096, strings.Repeat("x", 4094)},
		{"partial", strings.Repeat("你", 30), 12, strings.Repeat("你", 10)},
		{"partial", "no limit", 0, "no limit"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %.12q", tt.mode, tt.text), func(t *testing.T) {
			if got := im.Visible(tt.text, tt.mode, tt.limit); got != tt.want {
				t.Fatalf("got %.30q, want %.30q", got, tt.want)
			}
		})
	}
}

// part records what SendPart asks of a platform.
type part struct {
	text    []bool
	calls   []string
	editErr error
	failAt  int // Send of this message fails once (-1: never)
}

func (p *part) Len() int          { return len(p.text) }
func (p *part) IsText(k int) bool { return p.text[k] }
func (p *part) Send(_ context.Context, k int) (string, error) {
	if k == p.failAt {
		p.failAt = -1
		p.calls = append(p.calls, fmt.Sprintf("send %d failed", k))
		return "", errors.New("platform down")
	}
	p.calls = append(p.calls, fmt.Sprintf("send %d", k))
	return fmt.Sprintf("m%d", k), nil
}
func (p *part) Edit(_ context.Context, preview string, k int) (string, error) {
	p.calls = append(p.calls, fmt.Sprintf("edit %s with %d", preview, k))
	if p.editErr != nil {
		return "", p.editErr
	}
	return preview, nil
}
func (p *part) Delete(_ context.Context, preview string) {
	p.calls = append(p.calls, "delete "+preview)
}

// TestSendPart: the preview is replaced by text message 0 (deleted before media, sent anew
// when it is gone), and a retried part resumes after the messages the ledger has.
func TestSendPart(t *testing.T) {
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ledger, err := im.NewLedger(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		text     []bool
		preview  string
		editErr  error
		failAt   int
		first    string
		calls    string
		retryErr bool
	}{
		{"no preview", []bool{true, false}, "", nil, -1, "m0", "send 0|send 1", false},
		{"preview edited", []bool{true, true}, "p1", nil, -1, "p1", "edit p1 with 0|send 1", false},
		{"preview deleted before media", []bool{false, true}, "p1", nil, -1, "m0", "delete p1|send 0|send 1", false},
		{"preview gone", []bool{true}, "p1", im.Permanentf("x", "edit", "unknown message"), -1, "m0", "edit p1 with 0|send 0", false},
		{"retry resumes", []bool{true, true, true}, "", nil, 1, "m0", "send 0|send 1 failed|send 1|send 2", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &part{text: tt.text, editErr: tt.editErr, failAt: tt.failAt}
			out := fmt.Sprintf("out-%d", i)
			first, err := im.SendPart(ctx, ledger, out, tt.preview, p)
			if tt.retryErr {
				if err == nil {
					t.Fatal("no error from a failed send")
				}
				first, err = im.SendPart(ctx, ledger, out, "", p)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(p.calls, "|"); first != tt.first || got != tt.calls {
				t.Fatalf("first %q calls %q, want %q %q", first, got, tt.first, tt.calls)
			}
		})
	}
}
