package testwait

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the test, so the failure
// path of Eventually can be looked at. Fatalf ends the calling goroutine, as t.Fatalf does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

// run calls Eventually on r and reports whether it failed.
func run(r *recorder, within time.Duration, cond func() error) (failed bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != r {
				panic(p)
			}
			failed = true
		}
	}()
	Eventually(r, within, cond)
	return false
}

func TestEventually(t *testing.T) {
	t.Run("returns once the condition holds", func(t *testing.T) {
		var calls atomic.Int32
		r := &recorder{TB: t}
		failed := run(r, time.Minute, func() error {
			return Want(calls.Add(1) >= 3, "call %d of 3", calls.Load())
		})
		if failed || calls.Load() != 3 {
			t.Fatalf("failed=%v (%q) after %d calls, want success on the third", failed, r.msg, calls.Load())
		}
	})
	t.Run("a failure says what was still missing", func(t *testing.T) {
		r := &recorder{TB: t}
		var n int
		failed := run(r, 30*time.Millisecond, func() error {
			n++
			return errors.New("no reply in scene 41")
		})
		if !failed || !strings.Contains(r.msg, "no reply in scene 41") || n < 2 {
			t.Fatalf("failed=%v after %d tries with %q, want a failure naming the last error", failed, n, r.msg)
		}
	})
	t.Run("Want formats what was seen", func(t *testing.T) {
		if err := Want(true, "unused"); err != nil {
			t.Fatal(err)
		}
		if err := Want(false, "%d of %d", 1, 2); err == nil || err.Error() != "1 of 2" {
			t.Fatalf("Want(false) = %v, want \"1 of 2\"", err)
		}
	})
}
