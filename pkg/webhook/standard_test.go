package webhook

import (
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestVerifyStandard(t *testing.T) {
	body := []byte(`{"id":"m1"}`)
	now := time.Unix(1_800_000_000, 0)
	whsec := "whsec_" + base64.StdEncoding.EncodeToString([]byte("raw key bytes"))
	tests := []struct {
		name      string
		signWith  string
		verifyKey string
		ts        time.Time
		tolerance time.Duration
		mutate    func(http.Header)
		wantErr   error
	}{
		{"raw secret", "s3cret", "s3cret", now, 0, nil, nil},
		{"whsec secret", whsec, whsec, now, 0, nil, nil},
		{"whsec is its decoded key", "raw key bytes", whsec, now, 0, nil, nil},
		{"wrong key", "a", "b", now, 0, nil, ErrBadSignature},
		{"edge of window", "k", "k", now.Add(-5 * time.Minute), 0, nil, nil},
		{"just too old", "k", "k", now.Add(-5*time.Minute - time.Second), 0, nil, ErrStale},
		{"too new", "k", "k", now.Add(5*time.Minute + time.Second), 0, nil, ErrStale},
		{"custom tolerance", "k", "k", now.Add(-30 * time.Second), 10 * time.Second, nil, ErrStale},
		{"missing signature", "k", "k", now, 0, func(h http.Header) { h.Del(HeaderSignature) }, ErrBadSignature},
		{"timestamp not a number", "k", "k", now, 0, func(h http.Header) { h.Set(HeaderTimestamp, "soon") }, ErrBadSignature},
		{"bad whsec", "k", "whsec_***", now, 0, nil, ErrBadSignature},
		// A timestamp in milliseconds, or one made up to overflow time.Duration, is no
		// timestamp: it once passed the window and stayed replayable for good (issue 36).
		{"timestamp in milliseconds", "k", "k", time.Unix(now.UnixMilli(), 0), 0, nil, ErrStale},
		{"timestamp 1e18", "k", "k", time.Unix(1e18, 0), 0, nil, ErrStale},
		{"timestamp near int64 max", "k", "k", time.Unix(1<<62, 0), 0, nil, ErrStale},
		{"timestamp zero", "k", "k", time.Unix(0, 0), 0, nil, ErrStale},
		{"timestamp negative", "k", "k", time.Unix(-1e18, 0), 0, nil, ErrStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := SignStandard(tt.signWith, "msg_1", tt.ts, body)
			if err != nil {
				t.Fatal(err)
			}
			if tt.mutate != nil {
				tt.mutate(h)
			}
			id, _, err := VerifyStandard(tt.verifyKey, body, h, now, tt.tolerance)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && id != "msg_1" {
				t.Errorf("id = %q", id)
			}
		})
	}
}

// TestCheckTimeBounds: the window holds for times far outside time.Duration's range, either way.
func TestCheckTimeBounds(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tol := 5 * time.Minute
	tests := []struct {
		name string
		ts   time.Time
		ok   bool
	}{
		{"now", now, true},
		{"edge, past", now.Add(-tol), true},
		{"edge, future", now.Add(tol), true},
		{"past", now.Add(-tol - time.Millisecond), false},
		{"future", now.Add(tol + time.Millisecond), false},
		{"body time 1e18 ms", time.UnixMilli(1e18), false},
		{"body time max int64 ms", time.UnixMilli(1<<63 - 1), false},
		{"body time min int64 ms", time.UnixMilli(-1 << 63), false},
		{"seconds 1e18", time.Unix(1e18, 0), false},
		{"seconds -1e18", time.Unix(-1e18, 0), false},
		{"300 years ahead", now.AddDate(300, 0, 0), false},
		{"300 years ago", now.AddDate(-300, 0, 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTime(tt.ts, now, tol)
			if tt.ok != (err == nil) {
				t.Fatalf("CheckTime(%v) = %v, want ok=%v", tt.ts, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrStale) {
				t.Fatalf("err = %v, want ErrStale", err)
			}
		})
	}
}
