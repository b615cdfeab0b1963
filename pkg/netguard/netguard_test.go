package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// mapResolver resolves names from a table: the test hook that makes a "public-looking" name
// point at the local httptest server.
type mapResolver map[string][]string

func (m mapResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	addrs, ok := m[strings.ToLower(host)]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, a := range addrs {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

func TestClassify(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1":            "loopback",
		"127.9.9.9":            "loopback",
		"::1":                  "loopback",
		"::ffff:127.0.0.1":     "loopback",
		"10.1.2.3":             "private",
		"172.16.0.1":           "private",
		"172.31.255.255":       "private",
		"192.168.1.1":          "private",
		"fd12:3456::1":         "private",
		"fc00::1":              "private",
		"169.254.1.1":          "link-local",
		"fe80::1":              "link-local",
		"100.64.0.1":           "carrier-grade NAT",
		"100.127.255.255":      "carrier-grade NAT",
		"224.0.0.1":            "multicast",
		"ff02::1":              "multicast",
		"0.0.0.0":              "unspecified",
		"::":                   "unspecified",
		"0.1.2.3":              "this network",
		"169.254.169.254":      "cloud metadata",
		"fd00:ec2::254":        "cloud metadata",
		"100.100.100.200":      "cloud metadata",
		"255.255.255.255":      "reserved",
		"64:ff9b::7f00:1":      "loopback",
		"2002:c0a8:101::1":     "private",
		"8.8.8.8":              "",
		"1.1.1.1":              "",
		"172.32.0.1":           "",
		"100.128.0.1":          "",
		"2606:4700:4700::1111": "",
		"::ffff:8.8.8.8":       "",
	}
	for in, want := range cases {
		got := Classify(netip.MustParseAddr(in))
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("Classify(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckAddrConfig(t *testing.T) {
	g := MustNew(Config{AllowPrivate: true})
	if err := g.CheckAddr("", netip.MustParseAddr("10.0.0.1")); err != nil {
		t.Errorf("allowPrivate should allow 10.0.0.1: %v", err)
	}
	if err := g.CheckAddr("", netip.MustParseAddr("169.254.169.254")); !errors.Is(err, ErrBlocked) {
		t.Errorf("allowPrivate must not open the metadata endpoint: %v", err)
	}
	g = MustNew(Config{AllowHosts: []string{"10.9.0.0/16", "wiki.corp", "*.svc.local", "192.168.7.7"}})
	for _, ok := range []struct {
		host, addr string
	}{{"", "10.9.1.1"}, {"wiki.corp", "10.1.1.1"}, {"a.b.svc.local", "127.0.0.1"}, {"", "192.168.7.7"}} {
		if err := g.CheckAddr(ok.host, netip.MustParseAddr(ok.addr)); err != nil {
			t.Errorf("%s/%s should be allowed: %v", ok.host, ok.addr, err)
		}
	}
	if err := g.CheckAddr("other", netip.MustParseAddr("10.8.1.1")); !errors.Is(err, ErrBlocked) {
		t.Errorf("10.8.1.1 should stay blocked: %v", err)
	}
	if _, err := New(Config{AllowHosts: []string{"10.0.0.0/99"}}); err == nil {
		t.Error("bad CIDR accepted")
	}
}

func TestCheckURL(t *testing.T) {
	g := MustNew(Config{})
	for _, raw := range []string{
		"file:///etc/passwd", "gopher://x", "http://user:pw@example.com/", "http://127.0.0.1/",
		"http://[::1]:8080/", "http://metadata.google.internal/computeMetadata/v1/",
		"http://169.254.169.254/latest/meta-data/", "http://[::ffff:10.0.0.1]/", "http:///nohost",
	} {
		u, _ := url.Parse(raw)
		if err := g.CheckURL(u); !errors.Is(err, ErrBlocked) {
			t.Errorf("CheckURL(%s) = %v, want blocked", raw, err)
		}
	}
	u, _ := url.Parse("https://example.com/page")
	if err := g.CheckURL(u); err != nil {
		t.Errorf("public URL: %v", err)
	}
}

func TestFetchBlocksLoopbackByDefault(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "internal secret")
	}))
	defer srv.Close()
	g := MustNew(Config{})
	_, err := g.Fetch(context.Background(), srv.URL, FetchOptions{})
	var be *BlockedError
	if !errors.As(err, &be) || !strings.Contains(be.Reason, "loopback") {
		t.Fatalf("Fetch(%s) = %v, want loopback blocked", srv.URL, err)
	}
	// A name that resolves to loopback is refused at dial time (DNS rebinding / internal names).
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	g = MustNew(Config{Resolver: mapResolver{"rebind.example": {"93.184.216.34", "127.0.0.1"}}})
	_, err = g.Fetch(context.Background(), fmt.Sprintf("http://rebind.example:%d/", port), FetchOptions{})
	if !errors.As(err, &be) || be.Host != "rebind.example" || !strings.Contains(be.Reason, "loopback") {
		t.Fatalf("rebind: %v", err)
	}
	// With allowPrivate the same server is reachable.
	g = MustNew(Config{AllowPrivate: true})
	r, err := g.Fetch(context.Background(), srv.URL, FetchOptions{})
	if err != nil || string(r.Body) != "internal secret" {
		t.Fatalf("allowPrivate fetch: %v %+v", err, r)
	}
}

func TestRedirectToLoopbackBlocked(t *testing.T) {
	var internalHits int
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHits++
		fmt.Fprint(w, "admin panel")
	}))
	defer internal.Close()
	// The "public" server redirects to the loopback one. It also listens on 127.0.0.1, so the
	// test allows its name explicitly (allowHosts + the resolver hook); the redirect target is
	// a bare 127.0.0.1 URL that nothing allows.
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-loopback":
			http.Redirect(w, r, internal.URL+"/admin", http.StatusFound)
		case "/to-name":
			http.Redirect(w, r, fmt.Sprintf("http://evil.example:%d/admin", internal.Listener.Addr().(*net.TCPAddr).Port), http.StatusMovedPermanently)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			fmt.Fprint(w, "public page")
		}
	}))
	defer public.Close()
	port := public.Listener.Addr().(*net.TCPAddr).Port
	g := MustNew(Config{
		AllowHosts: []string{"public.example"},
		Resolver:   mapResolver{"public.example": {"127.0.0.1"}, "evil.example": {"127.0.0.1"}},
	})
	base := fmt.Sprintf("http://public.example:%d", port)

	r, err := g.Fetch(context.Background(), base+"/", FetchOptions{})
	if err != nil || string(r.Body) != "public page" {
		t.Fatalf("allowed first hop: %v", err)
	}
	for _, path := range []string{"/to-loopback", "/to-name", "/to-metadata", "/to-file"} {
		_, err := g.Fetch(context.Background(), base+path, FetchOptions{})
		if !errors.Is(err, ErrBlocked) {
			t.Errorf("%s: err = %v, want ErrBlocked", path, err)
		}
	}
	if internalHits != 0 {
		t.Fatalf("internal server was reached %d times", internalHits)
	}
	if _, err := g.Fetch(context.Background(), base+"/loop", FetchOptions{}); !errors.Is(err, ErrTooManyRedirects) {
		t.Errorf("redirect loop: %v", err)
	}
}

func TestFetchLimitsSize(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("x", 5000))
	}))
	defer srv.Close()
	g := MustNew(Config{AllowHosts: []string{"127.0.0.1"}})
	r, err := g.Fetch(context.Background(), srv.URL, FetchOptions{MaxBytes: 1000})
	if err != nil || len(r.Body) != 1000 || !r.Truncated {
		t.Fatalf("%v len=%d truncated=%v", err, len(r.Body), r != nil && r.Truncated)
	}
}
