package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"golang.org/x/sys/unix"
)

// TestMain doubles as a tiny client the tests run inside the sandbox (a
// copy of the test binary): bash reaches TCP through /dev/tcp, but not
// Unix sockets.
func TestMain(m *testing.M) {
	if target := os.Getenv("SANDBOX_TEST_DIAL"); target != "" {
		network, address, _ := strings.Cut(target, ",")
		c, err := net.DialTimeout(network, address, 3*time.Second)
		if err != nil {
			fmt.Println("DIAL FAILED:", err)
			os.Exit(3)
		}
		c.Close()
		fmt.Println("CONNECTED")
		os.Exit(0)
	}
	if f := os.Getenv("SANDBOX_TEST_SECCOMP"); f != "" {
		seccompHelper(f, os.Getenv("SANDBOX_TEST_WS"))
		return
	}
	if mode := os.Getenv("SANDBOX_TEST_OPTOUT"); mode != "" {
		optOutHelper(mode == "protected", os.Getenv("SANDBOX_TEST_WS"))
		return
	}
	if n := os.Getenv("SANDBOX_TEST_SPAWN"); n != "" {
		spawn(n)
		return
	}
	os.Exit(m.Run())
}

// spawn starts up to n sleeping children and prints how many started and
// the first error.
func spawn(n string) {
	want, _ := strconv.Atoi(n)
	var kids []*exec.Cmd
	var firstErr error
	for range want {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			firstErr = err
			break
		}
		kids = append(kids, c)
	}
	fmt.Printf("STARTED %d %v\n", len(kids), firstErr)
	for _, c := range kids {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	os.Exit(0)
}

// copyTestBinary puts a copy of the test binary into ws as ./dialer.
func copyTestBinary(t *testing.T, ws string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "dialer"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
}

// countUID counts the host's processes whose real uid is uid.
func countUID(uid uint32) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	want := "Uid:\t" + strconv.FormatUint(uint64(uid), 10) + "\t"
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err == nil && strings.Contains(string(b), want) && !strings.Contains(string(b), "State:\tZ") {
			n++
		}
	}
	return n
}

func needIsolation(t *testing.T) Isolation {
	t.Helper()
	i := Probe()
	if !i.Available {
		t.Skipf("bubblewrap isolation unavailable here (%s); CI installs the Debian package bubblewrap", i.Reason)
	}
	return i
}

func needOutbound(t *testing.T) Isolation {
	t.Helper()
	i := needIsolation(t)
	if !i.Outbound {
		t.Skipf("outbound network mode unavailable here (%s); CI installs slirp4netns and iproute2", i.OutboundReason)
	}
	return i
}

// listen opens a TCP listener that accepts and answers "hello" to anyone.
func listen(t *testing.T, addr string) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveHello(ln)
	return ln.Addr().(*net.TCPAddr)
}

func serveHello(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.WriteString(c, "hello\n")
		}()
	}
}

// hostAddr is a non-loopback IPv4 address of this host, or "".
func hostAddr() string {
	for _, a := range hostAddrs() {
		if a.Is4() && !a.IsLoopback() {
			return a.String()
		}
	}
	return ""
}

// dialCmd is a bash line that prints REACHED and the server's greeting
// when host:port accepts a TCP connection.
func dialCmd(host string, port int) string {
	return fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && read -r -t 3 l <&3 && echo REACHED:$l", host, port)
}

// TestIsolationNetwork: no sandboxed command reaches a listener of the
// host: not on 127.0.0.1 (a test listener and a real NATS server), not
// through the host's own address (a listener on 0.0.0.0), not through
// slirp4netns's alias of the host (10.0.2.2), not on an abstract Unix
// socket. With the network of the host (NetworkHost, the control) the same
// commands do reach them, so the test proves something.
func TestIsolationNetwork(t *testing.T) {
	needIsolation(t)
	loop := listen(t, "127.0.0.1:0")
	any := listen(t, "0.0.0.0:0")
	ns := natstest.New(t, natstest.WithListen(), natstest.WithMemoryStorage(), natstest.WithoutProvision())
	natsPort, err := strconv.Atoi(ns.URL[strings.LastIndexByte(ns.URL, ':')+1:])
	if err != nil {
		t.Fatalf("nats url %q", ns.URL)
	}
	abstract := fmt.Sprintf("@agentbus-sandbox-test-%d", os.Getpid())
	uln, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uln.Close() })
	go serveHello(uln)

	ws := workdir(t)
	copyTestBinary(t, ws)
	targets := []struct {
		name, cmd string
		env       []string
	}{
		{"host loopback listener", dialCmd("127.0.0.1", loop.Port), nil},
		{"nats port", dialCmd("127.0.0.1", natsPort), nil},
		{"slirp host alias", dialCmd("10.0.2.2", loop.Port), nil},
		{"slirp resolver, other port", dialCmd("10.0.2.3", loop.Port), nil},
		{"abstract unix socket", "./dialer", []string{"SANDBOX_TEST_DIAL=unix," + abstract}},
	}
	if h := hostAddr(); h != "" {
		targets = append(targets, struct {
			name, cmd string
			env       []string
		}{"host's own address", dialCmd(h, any.Port), nil})
	}
	for _, mode := range []Network{NetworkNone, NetworkOutbound, NetworkHost} {
		if mode == NetworkOutbound && !Probe().Outbound {
			continue
		}
		for _, tt := range targets {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				// The dialer is a Go test binary, perhaps built with -race, whose
				// shadow memory RLIMIT_DATA would count: no memory limit here.
				res, err := Run(context.Background(), Spec{Command: tt.cmd, Dir: ws, Env: tt.env, Network: mode, RequireIsolation: true, Timeout: 20 * time.Second,
					Limits: Limits{MemoryMiB: -1}})
				if err != nil {
					t.Fatal(err)
				}
				out := res.Stdout + res.Stderr
				reached := strings.Contains(out, "REACHED:") || strings.Contains(out, "CONNECTED")
				switch {
				case mode == NetworkHost && strings.HasPrefix(tt.name, "slirp "):
					// no slirp4netns with the host's network: nothing to show
				case mode == NetworkHost && !reached:
					t.Fatalf("control: with the host's network %q did not reach the listener, so the test proves nothing:\n%s", tt.cmd, out)
				case mode != NetworkHost && reached:
					t.Fatalf("network %s: %q reached a listener of the host:\n%s", mode, tt.cmd, out)
				}
			})
		}
	}
}

// TestIsolationOutbound: in NetworkOutbound the sandbox gets an interface
// and a default route from slirp4netns and reaches a server at a public
// (documentation) address in a network namespace the test creates and
// links to the host with a veth pair; the same server at a private address
// is unreachable until AllowNets names its prefix; the host's end of the
// link (one of the host's own addresses) stays unreachable even then.
// Creating the namespace needs root; no packet leaves the machine.
func TestIsolationOutbound(t *testing.T) {
	i := needOutbound(t)
	ws := workdir(t)
	res, err := Run(context.Background(), Spec{Command: "ip -4 addr show; ip route; ip rule; cat /etc/resolv.conf", Dir: ws, Network: NetworkOutbound, RequireIsolation: true, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tap0", "10.0.2.100", "default via 10.0.2.2", "to 10.0.0.0/8 prohibit", "to 169.254.0.0/16 prohibit", "to 127.0.0.0/8 prohibit", "nameserver 10.0.2.3"} {
		if !strings.Contains(res.Stdout, want) {
			t.Fatalf("outbound sandbox lacks %q:\n%s%s", want, res.Stdout, res.Stderr)
		}
	}
	if os.Geteuid() != 0 || i.ip == "" {
		t.Skip("creating a network namespace for the far server needs root")
	}
	const (
		pubHost, pubPeer   = "198.51.100.1", "198.51.100.2" // TEST-NET-2
		privHost, privPeer = "10.251.0.1", "10.251.0.2"
	)
	name := fmt.Sprintf("abx%d", os.Getpid()%100000)
	ipc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(i.ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ipc("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command(i.ip, "netns", "del", name).Run() })
	ipc("link", "add", name+"h", "type", "veth", "peer", "name", name+"p")
	t.Cleanup(func() { _ = exec.Command(i.ip, "link", "del", name+"h").Run() })
	ipc("link", "set", name+"p", "netns", name)
	ipc("addr", "add", pubHost+"/30", "dev", name+"h")
	ipc("addr", "add", privHost+"/30", "dev", name+"h")
	ipc("link", "set", name+"h", "up")
	ipc("-n", name, "addr", "add", pubPeer+"/30", "dev", name+"p")
	ipc("-n", name, "addr", "add", privPeer+"/30", "dev", name+"p")
	ipc("-n", name, "link", "set", name+"p", "up")
	ipc("-n", name, "link", "set", "lo", "up")

	// The far server listens inside that namespace: a thread that joined
	// it opens the socket (and then dies with its goroutine).
	lnc := make(chan net.Listener, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		f, err := os.Open("/run/netns/" + name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			errc <- err
			return
		}
		lnc <- ln
	}()
	var far net.Listener
	select {
	case far = <-lnc:
	case err := <-errc:
		t.Fatal(err)
	}
	t.Cleanup(func() { far.Close() })
	go serveHello(far)
	port := far.Addr().(*net.TCPAddr).Port
	hostLn := listen(t, "0.0.0.0:0")

	run := func(cmd string, allow ...netip.Prefix) string {
		t.Helper()
		res, err := Run(context.Background(), Spec{Command: cmd, Dir: ws, Network: NetworkOutbound, AllowNets: allow, RequireIsolation: true, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res.Stdout + res.Stderr
	}
	if out := run(dialCmd(pubPeer, port)); !strings.Contains(out, "REACHED:hello") {
		t.Fatalf("outbound: the server at %s:%d in another namespace was not reached:\n%s", pubPeer, port, out)
	}
	if out := run(dialCmd(privPeer, port)); strings.Contains(out, "REACHED") || !strings.Contains(out, "Permission denied") {
		t.Fatalf("outbound: a private address was reachable (or failed for another reason):\n%s", out)
	}
	allow := netip.MustParsePrefix("10.251.0.0/30")
	if out := run(dialCmd(privPeer, port), allow); !strings.Contains(out, "REACHED:hello") {
		t.Fatalf("outbound with AllowNets %s: %s not reached:\n%s", allow, privPeer, out)
	}
	for _, h := range []string{pubHost, privHost} {
		if out := run(dialCmd(h, hostLn.Port), allow); strings.Contains(out, "REACHED") {
			t.Fatalf("outbound: the host's own address %s was reachable:\n%s", h, out)
		}
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(pubHost, strconv.Itoa(hostLn.Port)), 3*time.Second); err != nil {
		t.Fatalf("control: the host's listener is not reachable at %s from the host: %v", pubHost, err)
	} else {
		c.Close()
	}
}

// TestIsolationLimits: the resource limits hold inside the sandbox. The process
// limit counts per user and the kernel exempts uid 0, so as root the test
// runs the sandbox as an unprivileged uid (Spec.RunAs), as a root tool
// worker must.
func TestIsolationLimits(t *testing.T) {
	needIsolation(t)
	ws := workdir(t)
	var runAs *Credential
	if os.Geteuid() == 0 {
		// A uid of its own, so that counting its processes from the host sees
		// nothing else (other tests on the machine may run as nobody).
		runAs = &Credential{UID: 61234, GID: 61234}
		for _, d := range []string{filepath.Dir(ws), ws} {
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
		}
	}
	lim := Limits{Processes: 40, MemoryMiB: 64, CPUSeconds: 1, OpenFiles: 64, TmpMiB: 8, FileMiB: 16}
	run := func(cmd string) Result {
		t.Helper()
		res, err := Run(context.Background(), Spec{Command: cmd, Dir: ws, Limits: lim, RunAs: runAs, RequireIsolation: true, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	t.Run("ulimit", func(t *testing.T) {
		res := run("ulimit -u; ulimit -d; ulimit -t; ulimit -n; ulimit -f; ulimit -H -u")
		want := "40\n65536\n1\n64\n16384\n40\n"
		if res.Stdout != want {
			t.Fatalf("limits inside: %q, want %q (%s)", res.Stdout, want, res.Stderr)
		}
	})
	t.Run("raise", func(t *testing.T) {
		res := run("ulimit -H -u 100000 && echo RAISED; ulimit -H -n 100000 && echo RAISED")
		if strings.Contains(res.Stdout, "RAISED") {
			t.Fatalf("a hard limit was raised: %s", res.Stdout)
		}
	})
	t.Run("processes", func(t *testing.T) {
		// 300 children, as the red team started, from a copy of the test
		// binary (bash retries a failed fork for 15 s; Go does not).
		// Harmless if the limit failed, so this runs before the real bomb.
		copyTestBinary(t, ws)
		// The memory limit is lifted for this Go binary: built with -race it
		// maps terabytes of shadow memory, which RLIMIT_DATA counts.
		spawnLim := lim
		spawnLim.MemoryMiB = -1
		res, err := Run(context.Background(), Spec{Command: "./dialer", Env: []string{"SANDBOX_TEST_SPAWN=300"}, Dir: ws, Limits: spawnLim, RunAs: runAs, RequireIsolation: true, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if _, err := fmt.Sscanf(res.Stdout, "STARTED %d", &n); err != nil || n == 0 || n >= lim.Processes {
			t.Fatalf("started %d of 300 children under a limit of %d: %q %q", n, lim.Processes, res.Stdout, res.Stderr)
		}
		if !strings.Contains(res.Stdout, "resource temporarily unavailable") {
			t.Fatalf("no fork failure reported: %q", res.Stdout)
		}
	})
	t.Run("fork bomb", func(t *testing.T) {
		if runAs == nil {
			t.Skip("counting the bomb's processes from outside needs them under a user of their own (root test)")
		}
		// Count, from the host, the processes of the sandbox's user while
		// the bomb runs: bwrap outside and its init inside come on top of
		// the limit.
		stop := make(chan struct{})
		peak := make(chan int, 1)
		go func() {
			max := 0
			for {
				select {
				case <-stop:
					peak <- max
					return
				case <-time.After(20 * time.Millisecond):
				}
				if n := countUID(runAs.UID); n > max {
					max = n
				}
			}
		}()
		res, err := Run(context.Background(), Spec{Command: ":(){ :|:& };:; sleep 3", Dir: ws, Limits: lim, RunAs: runAs, RequireIsolation: true, Timeout: 8 * time.Second})
		close(stop)
		if err != nil {
			t.Fatal(err)
		}
		if p := <-peak; p == 0 || p > lim.Processes+2 {
			t.Fatalf("the fork bomb peaked at %d processes (limit %d): %+v", p, lim.Processes, res)
		}
		// Nothing of it may be left.
		testwait.Eventually(t, 0, func() error {
			n := countUID(runAs.UID)
			return testwait.Want(n == 0, "%d processes of the bomb outlived the call", n)
		})
	})
	t.Run("memory", func(t *testing.T) {
		res := run(`x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`)
		if strings.Contains(res.Stdout, "200000000") {
			t.Fatalf("a 200 MB variable fit under a 64 MiB limit")
		}
		if res.ExitCode == 0 && !strings.Contains(res.Stderr, "allocate") {
			t.Fatalf("memory limit: %+v", res)
		}
	})
	t.Run("cpu", func(t *testing.T) {
		start := time.Now()
		res := run("while :; do :; done")
		if res.TimedOut || time.Since(start) > 20*time.Second || res.ExitCode == 0 {
			t.Fatalf("a busy loop was not stopped by a 1 s CPU limit: %+v after %s", res, time.Since(start))
		}
	})
	t.Run("open files", func(t *testing.T) {
		res := run("n=0; for i in $(seq 200); do exec {fd}</dev/null || break; n=$((n+1)); done; echo $n")
		n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
		if n == 0 || n >= 64 {
			t.Fatalf("opened %d files under a limit of 64: %q", n, res.Stderr)
		}
	})
	for _, dir := range []string{"/tmp", "/dev/shm"} {
		t.Run("tmpfs "+dir, func(t *testing.T) {
			res := run("head -c 50000000 /dev/zero > " + dir + "/fill; stat -c %s " + dir + "/fill")
			n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
			if n == 0 || n > 8<<20 {
				t.Fatalf("wrote %d bytes to %s (limit 8 MiB): %s", n, dir, res.Stderr)
			}
		})
	}
	t.Run("file size", func(t *testing.T) {
		res := run("head -c 50000000 /dev/zero > big; stat -c %s big; rm -f big")
		n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
		if n == 0 || n > 16<<20 {
			t.Fatalf("wrote a %d byte file (limit 16 MiB): %s", n, res.Stderr)
		}
	})
	t.Run("ram-backed root and dev", func(t *testing.T) {
		res := run("echo x > /rootfile; echo x > /dev/devfile; mkdir /newdir; ls / /dev")
		if strings.Contains(res.Stdout, "rootfile") || strings.Contains(res.Stdout, "devfile") || strings.Contains(res.Stdout, "newdir") {
			t.Fatalf("wrote to the sandbox's RAM-backed / or /dev:\n%s", res.Stdout)
		}
	})
	t.Run("workspace still writable", func(t *testing.T) {
		res := run("echo ok > w && cat w && rm w")
		if res.Stdout != "ok\n" {
			t.Fatalf("%+v", res)
		}
	})
}

// TestIsolationHostile: more of what a hostile command tries, beyond TestIsolation's
// named cases.
func TestIsolationHostile(t *testing.T) {
	needIsolation(t)
	const secret = "sk-hostile-secret-0123456789"
	t.Setenv("OPENAI_API_KEY", secret)
	ws := workdir(t)
	// A process outside the sandbox that a `kill -9 -1` inside must not reach.
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	cases := []struct {
		name, cmd string
		bad       []string // output that means the boundary broke
	}{
		{"proc 1 environ", "cat /proc/1/environ | tr '\\0' '\\n'", []string{secret}},
		{"parent environ", "cat /proc/$PPID/environ /proc/$PPID/cmdline | tr '\\0' '\\n'", []string{secret, "sandbox.test"}},
		{"every environ", "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done", []string{secret}},
		{"sys", "ls /sys 2>&1; cat /sys/class/net/*/address 2>&1; cat /sys/fs/cgroup/* 2>&1", []string{"cgroup.procs"}},
		{"nested user namespace", "unshare -U -r id && echo NESTED", []string{"NESTED"}},
		{"mount", "mount -t tmpfs x /tmp && echo MOUNTED; mount -o remount,rw / && echo REMOUNTED", []string{"MOUNTED"}},
		{"kill everything", "kill -9 -1; echo after", nil},
		{"hostname", "hostname evil && echo RENAMED; hostname", []string{"RENAMED"}},
		{"devices", "ls /dev; cat /dev/mem /dev/kmsg /dev/sda 2>&1 | head -c 100", []string{"sda\n", "kmsg\n"}},
		{"ptrace parent", "cat /proc/$PPID/maps 2>&1 | grep -c sandbox.test", []string{"1\n"}},
		{"sysrq", "echo b > /proc/sysrq-trigger && echo TRIGGERED", []string{"TRIGGERED"}},
		{"setuid", "ls -la /usr/bin/su /usr/bin/sudo 2>&1; su -c id root </dev/null && echo ROOTED", []string{"ROOTED"}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), Spec{Command: tt.cmd, Dir: ws, RequireIsolation: true, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			out := res.Stdout + res.Stderr
			for _, b := range tt.bad {
				if strings.Contains(out, b) {
					t.Fatalf("%q: %q in the output:\n%s", tt.cmd, b, out)
				}
			}
		})
	}
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("kill -9 -1 inside the sandbox killed a host process: %v", err)
	}
}

// TestIsolationOptOut: the opt-out mode (no bwrap) does what it can.
// A worker that protects itself (ProtectProcess) and runs commands as
// another user keeps its environment and its 0600 files from them; the
// limits but the process count still apply.
func TestIsolationOptOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a command as another user needs root")
	}
	if Probe().Prlimit == "" {
		t.Skip("prlimit (util-linux) not installed")
	}
	const secret = "sk-unisolated-secret-0123456789"
	t.Setenv("OPENAI_API_KEY", secret)
	root := workdir(t)
	ws := filepath.Join(root, "ws")
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(root, "nats-credentials.json")
	if err := os.WriteFile(creds, []byte(`{"password":"`+secret+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ProtectProcess(); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Spec{
		Command: "cat /proc/$PPID/environ; cat " + creds + "; ulimit -t; ulimit -u",
		Dir:     ws, NoIsolation: true, RunAs: &Credential{UID: 65534, GID: 65534},
		Limits: Limits{CPUSeconds: 7}})
	if err != nil {
		t.Fatal(err)
	}
	out := res.Stdout + res.Stderr
	if strings.Contains(out, secret) {
		t.Fatalf("the unisolated command read a secret of the worker:\n%s", out)
	}
	sc := bufio.NewScanner(strings.NewReader(res.Stdout))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 2 || lines[0] != "7" || lines[1] == "" {
		t.Fatalf("limits without isolation: %q", res.Stdout)
	}
}

// optOutHelper plays a tool worker in the opt-out mode as Docker runs it:
// an unprivileged user (nobody, when started as root) with its secret in
// its environment, running a command unisolated as that same user.
func optOutHelper(protect bool, ws string) {
	if os.Geteuid() == 0 {
		if err := dropToNobody(); err != nil {
			fmt.Println("HELPER: drop root:", err)
			os.Exit(2)
		}
	}
	if protect {
		if err := ProtectProcess(); err != nil {
			fmt.Println("HELPER: protect:", err)
			os.Exit(2)
		}
	} else if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		// setuid made the process non-dumpable; a worker started as its
		// user (as in Docker) is dumpable until it protects itself.
		fmt.Println("HELPER: dumpable:", err)
		os.Exit(2)
	}
	res, err := Run(context.Background(), Spec{Command: "id -u; tr '\\0' '\\n' < /proc/$PPID/environ; head -c 64 /proc/$PPID/mem", Dir: ws, NoIsolation: true})
	fmt.Printf("RUN err=%v\n%s%s\n", err, res.Stdout, res.Stderr)
	os.Exit(0)
}

func dropToNobody() error {
	if err := syscall.Setgroups(nil); err != nil {
		return err
	}
	if err := syscall.Setgid(65534); err != nil {
		return err
	}
	return syscall.Setuid(65534)
}

// TestIsolationOptOutSameUser: in the opt-out mode a command runs as the
// worker's own user (as in Docker, where the worker cannot switch users);
// the non-dumpable worker keeps its environment and memory from it, and
// the same helper without ProtectProcess is the control.
func TestIsolationOptOutSameUser(t *testing.T) {
	const secret = "sk-same-user-secret-0123456789"
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ws := workdir(t)
	for _, d := range []string{filepath.Dir(ws), ws} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	run := func(mode string) string {
		t.Helper()
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "SANDBOX_TEST_OPTOUT="+mode, "SANDBOX_TEST_WS="+ws, "OPENAI_API_KEY="+secret, "TMPDIR="+ws)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := run("unprotected"); !strings.Contains(out, secret) {
		t.Fatalf("control: without ProtectProcess the command did not read the worker's environment, so the test proves nothing:\n%s", out)
	}
	out := run("protected")
	if strings.Contains(out, secret) || !strings.Contains(out, "Permission denied") {
		t.Fatalf("a command of the worker's own user read the non-dumpable worker's environment:\n%s", out)
	}
	if os.Geteuid() == 0 && !strings.Contains(out, "65534") {
		t.Fatalf("the helper did not run as nobody:\n%s", out)
	}
}
