package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BlockedNetworks are unreachable from a NetworkOutbound sandbox unless
// Spec.AllowNets lists them: the host's loopback, "this network",
// link-local (cloud metadata at 169.254.169.254), the private ranges,
// carrier-grade NAT, multicast and reserved space. The host's own
// addresses are blocked too, whatever range they lie in (a server on
// 0.0.0.0, the bus among them, is reachable through any of them), and
// AllowNets cannot reopen them.
var BlockedNetworks = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// slirpDNS is the resolver slirp4netns answers on inside the namespace
// (it forwards to the host's resolvers); slirpNet is its default network.
var slirpDNS = netip.MustParseAddr("10.0.2.3")

// outboundRules are the `ip rule` lines for the sandbox's namespace, split
// by family. Policy rules are looked up before any route (so no route
// slirp4netns or a later change adds can bypass them), in priority order:
// the resolver, the host's own addresses (prohibit), the operator's
// allowed prefixes, then BlockedNetworks (prohibit). A prohibited
// destination fails at connect with EACCES ("Permission denied").
func outboundRules(allow []netip.Prefix, hostAddrs []netip.Addr) (v4, v6 []string) {
	add := func(p netip.Prefix, prio int, action string) {
		line := fmt.Sprintf("rule add prio %d to %s %s", prio, p.Masked(), action)
		if p.Addr().Is4() {
			v4 = append(v4, line)
		} else {
			v6 = append(v6, line)
		}
	}
	add(netip.PrefixFrom(slirpDNS, 32), 80, "lookup main")
	for _, a := range hostAddrs {
		add(netip.PrefixFrom(a, a.BitLen()), 85, "prohibit")
	}
	for _, p := range allow {
		add(p, 90, "lookup main")
	}
	for _, p := range BlockedNetworks {
		add(p, 100, "prohibit")
	}
	return v4, v6
}

// hostAddrs are the addresses of the host's interfaces (the tool worker's
// network namespace).
func hostAddrs() []netip.Addr {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ifa := range ifas {
		if n, ok := ifa.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

var (
	resolvOnce sync.Once
	resolvPath string
	resolvErr  error
)

// resolvConf is a resolv.conf naming slirp4netns's resolver, written once
// per process and bound over /etc/resolv.conf in outbound sandboxes (the
// host's may name a loopback resolver, 127.0.0.11 in Docker, which is not
// reachable from the namespace).
func resolvConf() (string, error) {
	resolvOnce.Do(func() {
		f, err := os.CreateTemp("", "agentbus-resolv-")
		if err != nil {
			resolvErr = err
			return
		}
		defer f.Close()
		if _, err := f.WriteString("nameserver " + slirpDNS.String() + "\noptions edns0\n"); err != nil {
			resolvErr = err
			return
		}
		if err := f.Chmod(0o644); err != nil {
			resolvErr = err
			return
		}
		resolvPath = f.Name()
	})
	return resolvPath, resolvErr
}

// outbound is the running user-mode stack of one sandbox.
type outbound struct {
	slirp    *exec.Cmd
	exit     *os.File // closing it ends slirp4netns (--exit-fd)
	done     chan error
	stopOnce sync.Once
}

// nsGetUserns is NS_GET_USERNS (linux/nsfs.h): the user namespace that
// owns a namespace.
const nsGetUserns = 0xb701

// startOutbound connects the network namespace of a bwrap started with
// --info-fd 3 --block-fd 4 to slirp4netns, installs the policy rules, and
// only then lets bwrap run the command (by writing to its block fd). info
// is the read end of the info pipe, block the write end of the block pipe;
// both are closed on return.
func startOutbound(ctx context.Context, iso Isolation, spec Spec, info, block *os.File) (_ *outbound, err error) {
	defer info.Close()
	defer block.Close()
	deadline := time.Now().Add(15 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = info.SetReadDeadline(deadline)
	var st struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(info).Decode(&st); err != nil || st.ChildPid <= 0 {
		return nil, fmt.Errorf("bwrap info: %v", err)
	}
	netns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", st.ChildPid))
	if err != nil {
		return nil, fmt.Errorf("sandbox network namespace: %w", err)
	}
	defer netns.Close()
	// bwrap --disable-userns leaves the command in a nested user
	// namespace; the network namespace belongs to the outer one, whose
	// capabilities slirp4netns and ip need.
	ufd, _, errno := syscall.Syscall(syscall.SYS_IOCTL, netns.Fd(), nsGetUserns, 0)
	if errno != 0 {
		return nil, fmt.Errorf("owner of the sandbox network namespace: %w", errno)
	}
	userns := os.NewFile(ufd, "userns")
	defer userns.Close()

	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	var slirpErr bytes.Buffer
	// slirp4netns parses the sandbox's packets outside the sandbox, so it
	// confines itself: --enable-seccomp always; --enable-sandbox (its own
	// mount namespace with nothing in it, no capabilities) only as root,
	// because it becomes root in the joined user namespace, where bwrap
	// maps no root for an unprivileged worker.
	args := []string{"--configure", "--mtu=65520", "--disable-host-loopback", "--enable-seccomp"}
	if os.Geteuid() == 0 {
		args = append(args, "--enable-sandbox")
	}
	args = append(args, "--ready-fd=5", "--exit-fd=6", "--userns-path=/proc/self/fd/3", "--netns-type=path", "/proc/self/fd/4", "tap0")
	slirp := exec.Command(iso.slirp, args...)
	slirp.Env = []string{"PATH=" + DefaultPath}
	slirp.ExtraFiles = []*os.File{userns, netns, readyW, exitR}
	slirp.Stdout, slirp.Stderr = &slirpErr, &slirpErr
	slirp.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = slirp.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		exitW.Close()
		return nil, fmt.Errorf("start slirp4netns: %w", err)
	}
	o := &outbound{slirp: slirp, exit: exitW, done: make(chan error, 1)}
	go func() { o.done <- slirp.Wait() }()
	defer func() {
		if err != nil {
			o.stop()
			if msg := strings.TrimSpace(slirpErr.String()); msg != "" {
				err = fmt.Errorf("%w (slirp4netns: %.300s)", err, msg)
			}
		}
	}()
	_ = readyR.SetReadDeadline(deadline)
	if _, err := readyR.Read(make([]byte, 1)); err != nil {
		return o, fmt.Errorf("slirp4netns not ready: %v", err)
	}

	v4, v6 := outboundRules(spec.AllowNets, hostAddrs())
	rules := func(family string, lines []string) error {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		c := exec.CommandContext(cctx, iso.nsenter, "--user=/proc/self/fd/3", "--net=/proc/self/fd/4", "--preserve-credentials",
			"--", iso.ip, family, "-batch", "-")
		c.Env = []string{"PATH=" + DefaultPath}
		c.ExtraFiles = []*os.File{userns, netns}
		c.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s rules: %v: %.300s", family, err, out)
		}
		return nil
	}
	if err := rules("-4", v4); err != nil {
		return o, err
	}
	// The stack carries no IPv6 (slirp4netns runs without --enable-ipv6):
	// the v6 rules are a second fence; a kernel without IPv6 has nothing
	// to fence.
	if err := rules("-6", v6); err != nil && ipv6Enabled() {
		return o, err
	}
	if _, err := block.Write([]byte{'1'}); err != nil {
		return o, fmt.Errorf("release bwrap: %w", err)
	}
	return o, nil
}

func ipv6Enabled() bool {
	_, err := os.Stat("/proc/net/if_inet6")
	return err == nil
}

// stop ends slirp4netns: closing the exit fd asks it to, SIGKILL makes it.
// Safe to call more than once and on nil.
func (o *outbound) stop() {
	if o == nil {
		return
	}
	o.stopOnce.Do(func() {
		o.exit.Close()
		select {
		case <-o.done:
		case <-time.After(2 * time.Second):
			_ = o.slirp.Process.Kill()
			<-o.done
		}
	})
}
