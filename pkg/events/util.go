package events

import (
	"math"
	"strconv"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// trimFloat writes an integral JSON number without a fraction (ids arrive as numbers from some
// platforms' JSON).
func trimFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
