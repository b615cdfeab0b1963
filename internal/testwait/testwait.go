// Package testwait is how tests wait for something to happen: Eventually polls a condition
// until it holds or a deadline passes, and a failure says what was still missing.
//
// Tests wait on state, never on the clock: a test that sleeps a fixed time and then looks is
// either slow (the sleep is long) or flaky on a loaded machine (it is short). Eventually
// returns as soon as the condition holds, so its deadline can be wide enough for a CI machine
// at load 20+ at no cost to a passing run. A sleep stays only where it is the point of the
// test: waiting out a window to show that something does not happen, or pacing a fake.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

// Deadline is the default bound of Eventually (within 0): wide, because a passing run never
// waits for it and a pipeline on a machine at load 20+ can take tens of seconds to do what
// takes milliseconds on a quiet one.
const Deadline = 90 * time.Second

// Eventually calls cond until it returns nil and fails t with cond's last error if that has not
// happened within the given duration (0: Deadline). The error is what was still missing
// ("2 of 3 replies", "no dead letter on X: not found"), so write it for the reader of a failed
// run.
//
// cond runs on the calling goroutine, first at once, then at intervals that grow from 5ms to
// 100ms, so a quick condition is seen quickly and a long wait costs little CPU. Like t.Fatal,
// Eventually must be called from the test's goroutine.
func Eventually(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	if within <= 0 {
		within = Deadline
	}
	start := time.Now()
	deadline := start.Add(within)
	pause := 5 * time.Millisecond
	for tries := 1; ; tries++ {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not so after %v (%d tries): %v", time.Since(start).Round(time.Millisecond), tries, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// Want is the error of a yes-or-no condition: nil if ok, or else the formatted text, which
// says what was wanted and what was seen instead. It keeps the condition and its message on
// one line:
//
//	testwait.Eventually(t, 0, func() error { return testwait.Want(n.Load() == 3, "3 calls, have %d", n.Load()) })
func Want(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}
