package netguard

import (
	"net/netip"
	"net/url"
	"testing"
)

func BenchmarkCheckAddr(b *testing.B) {
	g := MustNew(Config{AllowHosts: []string{"wiki.corp", "*.svc.local", "10.9.0.0/16"}})
	addrs := []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1"),
		netip.MustParseAddr("2606:4700::1111"), netip.MustParseAddr("64:ff9b::a00:1")}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = g.CheckAddr("example.com", addrs[i%len(addrs)])
	}
}

func BenchmarkCheckURL(b *testing.B) {
	g := MustNew(Config{})
	u, _ := url.Parse("https://example.com/some/page?q=1")
	b.ReportAllocs()
	for b.Loop() {
		_ = g.CheckURL(u)
	}
}
