package events

import (
	"errors"
	"strings"
	"testing"
)

func TestEncodeToken(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "="},
		{"abc-XYZ_09", "abc-XYZ_09"},
		{"a.b", "a=2Eb"},
		{"*", "=2A"},
		{">", "=3E"},
		{"a b", "a=20b"},
		{"=", "=3D"},
		{"qq:123:group:456", "qq=3A123=3Agroup=3A456"},
		{"群", "=E7=BE=A4"},
		{"a/b", "a=2Fb"},
		{"\x00\xff", "=00=FF"},
	}
	for _, tt := range tests {
		got := EncodeToken(tt.in)
		if got != tt.want {
			t.Errorf("EncodeToken(%q) = %q, want %q", tt.in, got, tt.want)
		}
		back, err := DecodeToken(got)
		if err != nil || back != tt.in {
			t.Errorf("DecodeToken(%q) = %q, %v; want %q", got, back, err, tt.in)
		}
	}
}

func TestDecodeTokenRejectsNonCanonical(t *testing.T) {
	tests := []struct{ in, reason string }{
		{"", "empty token"},
		{"a.b", "not allowed"},
		{"a b", "not allowed"},
		{"=2e", "two upper-case hex digits"},
		{"=41", "must be written as itself"},
		{"=4", "truncated escape"},
		{"==", "truncated escape"},
		{"=G0", "two upper-case hex digits"},
		{"a*", "not allowed"},
	}
	for _, tt := range tests {
		_, err := DecodeToken(tt.in)
		if err == nil {
			t.Errorf("DecodeToken(%q): want error", tt.in)
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("DecodeToken(%q) = %v; want ErrInvalid mentioning %q", tt.in, err, tt.reason)
		}
	}
}

// subjectSafeKVKey is what both a NATS subject token and a JetStream KV key accept.
func subjectSafeKVKey(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '=') {
			return false
		}
	}
	return true
}

func FuzzTokenRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a", "a.b.c", "*", ">", " ", "=", "==3D", "qq:1:group:2", "群聊", "\xff\x00", "=41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := EncodeToken(s)
		if !subjectSafeKVKey(tok) {
			t.Fatalf("EncodeToken(%q) = %q is not subject/KV safe", s, tok)
		}
		back, err := DecodeToken(tok)
		if err != nil {
			t.Fatalf("DecodeToken(EncodeToken(%q)=%q): %v", s, tok, err)
		}
		if back != s {
			t.Fatalf("round trip %q -> %q -> %q", s, tok, back)
		}
		// The other direction: anything Decode accepts re-encodes to itself (bijection).
		if dec, err := DecodeToken(s); err == nil {
			if again := EncodeToken(dec); again != s {
				t.Fatalf("DecodeToken(%q) = %q re-encodes to %q", s, dec, again)
			}
		}
	})
}

func BenchmarkEncodeTokenSafe(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = EncodeToken("1234567890abcdef")
	}
}

func BenchmarkEncodeTokenSessionKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = EncodeToken("qq:bot1:group:1234567890")
	}
}
