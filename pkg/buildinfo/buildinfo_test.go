package buildinfo

import "testing"

func TestString(t *testing.T) {
	tests := []struct {
		in   Info
		want string
	}{
		{Info{Version: "v1.0.0"}, "v1.0.0"},
		{Info{Version: "v1.0.0", Revision: "abc"}, "v1.0.0 (abc)"},
		{Info{Version: "(devel)", Revision: "abc", Modified: true}, "(devel) (abc, modified)"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLdflagsOverride(t *testing.T) {
	version, revision = "v9.9.9", "0123456789abcdef0123"
	defer func() { version, revision = "", "" }()
	got := read()
	if got.Version != "v9.9.9" || got.Revision != "0123456789ab" || got.Modified {
		t.Fatalf("read() = %+v, want the -X values with the revision shortened", got)
	}
}

func TestGetNeverEmpty(t *testing.T) {
	if Get().Version == "" {
		t.Fatal("Get().Version is empty")
	}
}
