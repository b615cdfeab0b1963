package turn

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// A failed publish is first retried after about 50 ms (the backoff randomizes by half), not
// after the library's default 500 ms, and the schedule never gives up.
func TestPublishBackoffStartsAt50ms(t *testing.T) {
	b := publishBackoff()
	if d := b.NextBackOff(); d < 25*time.Millisecond || d > 75*time.Millisecond {
		t.Fatalf("first retry after %v, want 25–75 ms", d)
	}
	for range 50 {
		if d := b.NextBackOff(); d == backoff.Stop || d > 5*time.Second*3/2 {
			t.Fatalf("retry after %v, want at most 7.5 s and never Stop", d)
		}
	}
}
