// Package netguard is the SSRF guard for every outbound HTTP request a model can cause
// (web_fetch, install_skill, MCP over HTTP when wanted).
//
// A Guard refuses destinations that are loopback, private (RFC 1918, IPv6 ULA), link-local,
// CGNAT (100.64.0.0/10), multicast, unspecified, reserved, or cloud metadata endpoints
// (169.254.169.254, fd00:ec2::254, 100.100.100.200, metadata.google.internal, ...), unless the
// configuration allows them: AllowPrivate lifts the private-range block (never the metadata
// block), AllowHosts names hosts, wildcard domains ("*.corp.example"), IPs or CIDR prefixes that
// are always allowed.
//
// The check happens where it cannot be bypassed:
//   - at dial time: the guard resolves the host itself, refuses the connection if ANY resolved
//     address is blocked, and dials the very address it checked (net.Dialer.Control re-checks
//     the socket address), so DNS rebinding between check and connect does not help;
//   - on every redirect (http.Client.CheckRedirect), with a cap on the number of redirects;
//   - proxies from the environment are ignored (a proxy would make the dial check meaningless).
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked is matched (errors.Is) by every refusal; the concrete error is *BlockedError.
var ErrBlocked = errors.New("destination blocked by SSRF guard")

// ErrTooManyRedirects is returned when a response chain exceeds MaxRedirects.
var ErrTooManyRedirects = errors.New("too many redirects")

// BlockedError says which host/address was refused and why.
type BlockedError struct {
	Host   string
	Addr   netip.Addr // zero when refused by name or scheme
	Reason string
}

func (e *BlockedError) Error() string {
	if e.Addr.IsValid() && e.Host != "" && e.Host != e.Addr.String() {
		return fmt.Sprintf("%s (%s) is blocked: %s", e.Host, e.Addr, e.Reason)
	}
	if e.Addr.IsValid() {
		return fmt.Sprintf("%s is blocked: %s", e.Addr, e.Reason)
	}
	return fmt.Sprintf("%s is blocked: %s", e.Host, e.Reason)
}

// Is makes errors.Is(err, ErrBlocked) true.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// Resolver looks up a host's addresses. *net.Resolver implements it; tests plug in a map.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Config is the guard's policy (ai.agent.webFetch.allowPrivate / allowHosts).
type Config struct {
	// AllowPrivate allows loopback, private, link-local and CGNAT ranges. Cloud metadata
	// addresses stay blocked unless listed in AllowHosts.
	AllowPrivate bool
	// AllowHosts are always allowed: exact host names (case-insensitive), "*.domain" for any
	// subdomain, IP addresses or CIDR prefixes.
	AllowHosts []string
	// MaxRedirects caps redirects per request (default 5; negative: none followed).
	MaxRedirects int
	// Resolver defaults to net.DefaultResolver.
	Resolver Resolver
}

// Guard applies a Config. It is safe for concurrent use.
type Guard struct {
	allowPrivate bool
	hosts        map[string]bool
	suffixes     []string
	prefixes     []netip.Prefix
	maxRedirects int
	resolver     Resolver
	dialer       net.Dialer
	transport    *http.Transport // shared by Fetch and Client, so connections are reused
}

// New builds a guard. An unparsable AllowHosts entry is an error naming it.
func New(cfg Config) (*Guard, error) {
	g := &Guard{allowPrivate: cfg.AllowPrivate, hosts: map[string]bool{}, maxRedirects: cfg.MaxRedirects, resolver: cfg.Resolver}
	if g.maxRedirects == 0 {
		g.maxRedirects = 5
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	for _, h := range cfg.AllowHosts {
		h = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), "."))
		switch {
		case h == "":
		case strings.HasPrefix(h, "*."):
			g.suffixes = append(g.suffixes, h[1:])
		case strings.Contains(h, "/"):
			p, err := netip.ParsePrefix(h)
			if err != nil {
				return nil, fmt.Errorf("netguard: allowHosts entry %q: %w", h, err)
			}
			g.prefixes = append(g.prefixes, p.Masked())
		default:
			if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
				g.prefixes = append(g.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			g.hosts[h] = true
		}
	}
	g.dialer = net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	g.transport = g.newTransport()
	return g, nil
}

// MustNew is New for static configurations.
func MustNew(cfg Config) *Guard {
	g, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return g
}

func normHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
}

// hostAllowed reports whether a host name was explicitly allowed.
func (g *Guard) hostAllowed(host string) bool {
	h := normHost(host)
	if g.hosts[h] {
		return true
	}
	for _, s := range g.suffixes {
		if strings.HasSuffix(h, s) {
			return true
		}
	}
	return false
}

var metadataHosts = map[string]bool{
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"metadata":                   true,
	"instance-data":              true, // AWS
	"instance-data.ec2.internal": true,
}

var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, ...
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
		netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	}
	cgnat     = netip.MustParsePrefix("100.64.0.0/10")
	thisNet   = netip.MustParsePrefix("0.0.0.0/8")
	reserved4 = []netip.Prefix{
		netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments
		netip.MustParsePrefix("192.0.2.0/24"),  // TEST-NET-1
		netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
		netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("240.0.0.0/4"), // reserved + broadcast
	}
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	compat4   = netip.MustParsePrefix("::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Classify returns why addr is blocked ("" when it is a public address). It ignores the
// configuration; see CheckAddr.
func Classify(addr netip.Addr) string {
	a := addr.Unmap().WithZone("")
	for _, m := range metadataAddrs {
		if a == m {
			return "cloud metadata endpoint"
		}
	}
	switch {
	case !a.IsValid():
		return "invalid address"
	case a.IsUnspecified():
		return "unspecified address"
	case a.IsLoopback():
		return "loopback address"
	case a.IsPrivate():
		return "private address"
	case a.IsLinkLocalUnicast():
		return "link-local address"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast address"
	}
	if a.Is4() {
		switch {
		case cgnat.Contains(a):
			return "carrier-grade NAT address (100.64.0.0/10)"
		case thisNet.Contains(a):
			return "\"this network\" address (0.0.0.0/8)"
		}
		for _, p := range reserved4 {
			if p.Contains(a) {
				return "reserved address"
			}
		}
		return ""
	}
	// IPv6 forms that embed an IPv4 address: judge the embedded address.
	b := a.As16()
	var v4 netip.Addr
	switch {
	case nat64.Contains(a), compat4.Contains(a):
		v4 = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	case sixToFour.Contains(a):
		v4 = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
	}
	if v4.IsValid() {
		if r := Classify(v4); r != "" {
			return r + " (embedded in IPv6 " + a.String() + ")"
		}
	}
	return ""
}

// CheckAddr returns a *BlockedError when the guard refuses addr for host.
func (g *Guard) CheckAddr(host string, addr netip.Addr) error {
	a := addr.Unmap().WithZone("")
	if host != "" && g.hostAllowed(host) {
		return nil
	}
	for _, p := range g.prefixes {
		if p.Contains(a) {
			return nil
		}
	}
	reason := Classify(a)
	if reason == "" {
		return nil
	}
	if g.allowPrivate && reason != "cloud metadata endpoint" && reason != "invalid address" && reason != "unspecified address" {
		return nil
	}
	return &BlockedError{Host: host, Addr: a, Reason: reason}
}

// CheckURL refuses URLs that are not http(s), carry credentials, or name a blocked IP literal
// or metadata host. Host names are judged again at dial time against what they resolve to.
func (g *Guard) CheckURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return &BlockedError{Host: u.String(), Reason: "only http and https URLs are allowed"}
	}
	if u.User != nil {
		return &BlockedError{Host: u.Hostname(), Reason: "URLs with credentials are not allowed"}
	}
	host := u.Hostname()
	if host == "" {
		return &BlockedError{Host: u.String(), Reason: "URL has no host"}
	}
	if g.hostAllowed(host) {
		return nil
	}
	if metadataHosts[normHost(host)] {
		return &BlockedError{Host: host, Reason: "cloud metadata endpoint"}
	}
	if a, err := netip.ParseAddr(normHost(host)); err == nil {
		return g.CheckAddr(host, a)
	}
	return nil
}

// DialContext resolves addr's host, refuses it if any of its addresses is blocked, and
// connects to a checked address. Use it as http.Transport.DialContext.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	allowedByName := g.hostAllowed(host)
	if !allowedByName && metadataHosts[normHost(host)] {
		return nil, &BlockedError{Host: host, Reason: "cloud metadata endpoint"}
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(normHost(host)); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ips, err := g.resolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, ip := range ips {
			if a, ok := netip.AddrFromSlice(ip.IP); ok {
				addrs = append(addrs, a.Unmap())
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	// Refuse the host when any address is blocked: a name that mixes public and internal
	// addresses is either misconfigured or an attack.
	for _, a := range addrs {
		if err := g.CheckAddr(host, a); err != nil {
			return nil, err
		}
	}
	d := g.dialer
	d.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &BlockedError{Host: address, Reason: "unparsable socket address"}
		}
		return g.CheckAddr(host, ap.Addr())
	}
	var firstErr error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// Transport returns the guard's http.Transport: it dials through the guard and ignores
// proxies. It is shared; do not modify it.
func (g *Guard) Transport() *http.Transport { return g.transport }

func (g *Guard) newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            g.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           16,
		IdleConnTimeout:        60 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  30 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// CheckRedirect is an http.Client.CheckRedirect that re-checks every hop and caps the chain.
func (g *Guard) CheckRedirect(req *http.Request, via []*http.Request) error {
	if g.maxRedirects < 0 || len(via) > g.maxRedirects {
		return fmt.Errorf("%w (more than %d)", ErrTooManyRedirects, max(g.maxRedirects, 0))
	}
	if err := g.CheckURL(req.URL); err != nil {
		return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
	}
	return nil
}

// Client returns an http.Client whose every connection and redirect goes through the guard.
// timeout bounds a whole request including reading the body (0: none).
func (g *Guard) Client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: g.Transport(), CheckRedirect: g.CheckRedirect, Timeout: timeout}
}
