package turn

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
)

func TestLiveBufferCoalesces(t *testing.T) {
	type delta struct {
		message, block int
		text           string
	}
	cases := []struct {
		name   string
		deltas []delta
		want   []string // message/block:text, in publish order, after flush
	}{
		{"one run", []delta{{1, 0, "Hel"}, {1, 0, "lo, "}, {1, 0, "world"}}, []string{"1/0:Hello, world#1"}},
		{"new block", []delta{{1, 0, "a"}, {1, 1, "b"}, {1, 1, "c"}}, []string{"1/0:a#1", "1/1:bc#2"}},
		{"new message", []delta{{1, 0, "a"}, {3, 0, "b"}}, []string{"1/0:a#1", "3/0:b#2"}},
		{"nothing", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			l := &liveBuffer{publish: func(d events.LiveDelta) {
				got = append(got, fmt.Sprintf("%d/%d:%s#%d", d.Message, d.ContentIndex, d.Delta, d.Seq))
			}}
			for _, d := range tc.deltas {
				l.add("text_delta", d.message, d.block, d.text)
			}
			l.flush()
			l.flush() // nothing left: publishes nothing
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("published %v, want %v", got, tc.want)
			}
		})
	}
}

// Text a model streams slowly still reaches the preview without waiting for the message end.
func TestLiveBufferPublishesWhileStreaming(t *testing.T) {
	var mu sync.Mutex
	var got []string
	l := &liveBuffer{publish: func(d events.LiveDelta) {
		mu.Lock()
		got = append(got, d.Delta)
		mu.Unlock()
	}}
	published := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	l.add("text_delta", 0, 0, "first")
	testwait.Eventually(t, 0, func() error { return testwait.Want(len(published()) == 1, "%d published, want 1", len(published())) })
	l.add("text_delta", 0, 0, "second")
	testwait.Eventually(t, 0, func() error { return testwait.Want(len(published()) == 2, "%d published, want 2", len(published())) })
	l.flush()
	if p := published(); fmt.Sprint(p) != "[first second]" {
		t.Fatalf("published %v", p)
	}
	time.Sleep(2 * liveInterval) // a stopped timer publishes nothing more
	if p := published(); len(p) != 2 {
		t.Fatalf("published after flush: %v", p)
	}
}
