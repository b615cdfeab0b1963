package vendorkey

import "testing"

func TestFromEnv(t *testing.T) {
	t.Setenv("VK_A", "")
	t.Setenv("VK_B", "secret")
	tests := []struct {
		base, want string
	}{
		{"", "secret"},
		{"https://api.vendor.example/v1", "secret"},
		{"https://API.VENDOR.EXAMPLE/v2", "secret"},
		{"https://relay.example/v1", ""},
		{"http://127.0.0.1:8080", ""},
		{"://bad", ""},
	}
	for _, tt := range tests {
		if got := FromEnv(tt.base, "https://api.vendor.example/v1", "VK_A", "VK_B"); got != tt.want {
			t.Errorf("FromEnv(%q) = %q, want %q", tt.base, got, tt.want)
		}
	}
}
