package dendritetest

import "testing"

func TestOlderThan(t *testing.T) {
	for _, c := range []struct {
		v, than string
		want    bool
	}{
		{"v1.29.5", minSQLite, true},
		{"v1.42.1", minSQLite, true},
		{"v1.42.2", minSQLite, false},
		{"v1.62.0", minSQLite, false},
		{"v2.0.0", minSQLite, false},
		{"v1.100.0", minSQLite, false},
		{"v1.42.3-pre", minSQLite, false},
		{"v0.9.0", minSQLite, true},
	} {
		if got := olderThan(c.v, c.than); got != c.want {
			t.Errorf("olderThan(%q, %q) = %v, want %v", c.v, c.than, got, c.want)
		}
	}
}
