package bench

import (
	"math"
	"runtime/metrics"
	"time"
)

// schedLatencyMetric is how long goroutines waited to run once runnable. High values with few
// busy cores mean the process is short of CPU (another process holds the cores), which tells
// a starved run from a slow pipeline.
const schedLatencyMetric = "/sched/latencies:seconds"

// schedHist reads the cumulative scheduling-latency histogram (nil when unsupported).
func schedHist() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencyMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedPercentiles returns the p50 and p99 of the waits recorded between before and after.
func schedPercentiles(before, after *metrics.Float64Histogram) (p50, p99 time.Duration) {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return 0, 0
	}
	counts := make([]uint64, len(after.Counts))
	var total uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return 0, 0
	}
	at := func(q float64) time.Duration {
		want := uint64(math.Ceil(q * float64(total)))
		var seen uint64
		for i, c := range counts {
			seen += c
			if seen >= want {
				// Buckets[i+1] is bucket i's upper bound; the last may be +Inf.
				up := after.Buckets[i+1]
				if math.IsInf(up, 1) {
					up = after.Buckets[i]
				}
				return time.Duration(up * float64(time.Second))
			}
		}
		return 0
	}
	return at(0.50), at(0.99)
}
