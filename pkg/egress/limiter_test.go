package egress

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLimiterPerPlatform(t *testing.T) {
	l := newLimiter(map[string]RateLimit{"slow": {PerSecond: 0.5, Burst: 1}}, time.Minute)
	ctx := context.Background()
	if err := l.Wait(ctx, "slow"); err != nil {
		t.Fatalf("first token: %v", err)
	}
	// The bucket is empty for the next 2 s: a short deadline runs out.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(short, "slow"); err == nil {
		t.Fatal("second send on a 0.5/s platform was not throttled")
	}
	// Other platforms have their own bucket (none configured = unlimited).
	for i := 0; i < 100; i++ {
		if err := l.Wait(short, "fast"); err != nil {
			t.Fatalf("unlimited platform throttled: %v", err)
		}
	}
}

func TestLimiterDefaultAndPause(t *testing.T) {
	l := newLimiter(map[string]RateLimit{"*": {PerSecond: 1000, Burst: 5}}, 100*time.Millisecond)
	ctx := context.Background()
	// Retry-After pauses only that platform, capped at maxPause.
	l.Pause("p", time.Hour)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := l.Wait(short, "p"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused platform: %v", err)
	}
	other, cancel3 := context.WithTimeout(ctx, time.Second)
	defer cancel3()
	if err := l.Wait(other, "q"); err != nil {
		t.Fatalf("other platform paused too: %v", err)
	}
	long, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if err := l.Wait(long, "p"); err != nil {
		t.Fatalf("pause not capped at maxPause: %v", err)
	}
}
