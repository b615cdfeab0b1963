package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tool worker's container gets deploy/seccomp-toolworker.json instead of
// Docker's default profile, which forbids the namespaces bubblewrap needs.
// Docker cannot run here, so these tests check the profile's shape and then
// enforce it with a small loader of their own: the profile is compiled to a
// classic BPF filter (x86-64 only) the way Docker applies it to a container
// with the default capabilities, installed on a re-executed copy of this
// test binary, which then does what the tool worker does: Probe, and Run a
// command with outbound network (bwrap, prlimit, slirp4netns, nsenter and
// ip all start under the filter). The same loader with Docker's default
// rules for namespaces shows the failure the red team met.

type seccompProfile struct {
	Comment         string        `json:"comment"`
	DefaultAction   string        `json:"defaultAction"`
	DefaultErrnoRet *uint32       `json:"defaultErrnoRet"`
	ArchMap         []seccompArch `json:"archMap"`
	Syscalls        []seccompRule `json:"syscalls"`
}

type seccompArch struct {
	Architecture     string   `json:"architecture"`
	SubArchitectures []string `json:"subArchitectures"`
}

type seccompRule struct {
	Comment  string       `json:"comment"`
	Names    []string     `json:"names"`
	Action   string       `json:"action"`
	ErrnoRet *uint32      `json:"errnoRet"`
	Args     []seccompArg `json:"args"`
	Includes seccompCond  `json:"includes"`
	Excludes seccompCond  `json:"excludes"`
}

type seccompArg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

type seccompCond struct {
	Caps      []string `json:"caps"`
	Arches    []string `json:"arches"`
	MinKernel string   `json:"minKernel"`
}

// bwrapSyscalls must be allowed unconditionally for the sandbox to work.
var bwrapSyscalls = []string{"clone", "clone3", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "sethostname"}

func loadProfile(t *testing.T) seccompProfile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "seccomp-toolworker.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p seccompProfile
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("deploy/seccomp-toolworker.json: %v", err)
	}
	return p
}

// TestSeccompProfileShape: the profile is what Docker's loader accepts and
// allows what the sandbox needs without conditions.
func TestSeccompProfileShape(t *testing.T) {
	p := loadProfile(t)
	if p.DefaultAction != "SCMP_ACT_ERRNO" || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 1 {
		t.Fatalf("default action %q %v: want SCMP_ACT_ERRNO with errno 1 (EPERM), as Docker's default", p.DefaultAction, p.DefaultErrnoRet)
	}
	arches := map[string]bool{}
	for _, a := range p.ArchMap {
		if !strings.HasPrefix(a.Architecture, "SCMP_ARCH_") {
			t.Errorf("arch %q", a.Architecture)
		}
		arches[a.Architecture] = true
	}
	if !arches["SCMP_ARCH_X86_64"] || !arches["SCMP_ARCH_AARCH64"] {
		t.Errorf("archMap lacks x86-64 or aarch64: %v", arches)
	}
	allowed := map[string]bool{}
	for i, r := range p.Syscalls {
		if len(r.Names) == 0 {
			t.Errorf("syscalls[%d] has no names", i)
		}
		switch r.Action {
		case "SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO":
		default:
			t.Errorf("syscalls[%d] action %q", i, r.Action)
		}
		for _, a := range r.Args {
			switch a.Op {
			case "SCMP_CMP_EQ", "SCMP_CMP_NE", "SCMP_CMP_MASKED_EQ":
			default:
				t.Errorf("syscalls[%d] op %q", i, a.Op)
			}
			if a.Index > 5 {
				t.Errorf("syscalls[%d] arg index %d", i, a.Index)
			}
		}
		for _, n := range r.Names {
			if n == "" || strings.ContainsAny(n, " \t") {
				t.Errorf("syscalls[%d] name %q", i, n)
			}
		}
		if r.Action == "SCMP_ACT_ALLOW" && len(r.Args) == 0 && len(r.Includes.Caps)+len(r.Includes.Arches) == 0 && r.Includes.MinKernel == "" &&
			len(r.Excludes.Caps)+len(r.Excludes.Arches) == 0 {
			for _, n := range r.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range bwrapSyscalls {
		if !allowed[n] {
			t.Errorf("%s is not allowed unconditionally: bubblewrap needs it", n)
		}
	}
	// What the default forbids stays forbidden.
	for _, n := range []string{"bpf", "perf_event_open", "keyctl", "add_key", "request_key", "init_module", "kexec_load", "open_by_handle_at", "reboot", "swapon", "acct", "userfaultfd"} {
		if allowed[n] {
			t.Errorf("%s is allowed: Docker's default forbids it and the sandbox does not need it", n)
		}
	}
}

// dockerDefaultCaps are the capabilities a Docker container gets by
// default; the profile's "includes.caps" rules apply only when all their
// capabilities are among them.
var dockerDefaultCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

// syscallNumbers reads the x86-64 system call numbers from the kernel
// headers (libc6-dev, which the race detector's cgo needs anyway).
func syscallNumbers(t *testing.T) map[string]uint32 {
	t.Helper()
	f, err := os.Open("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
	if err != nil {
		t.Skipf("x86-64 syscall table not found (%v); install libc6-dev", err)
	}
	defer f.Close()
	out := map[string]uint32{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[0] == "#define" && strings.HasPrefix(fs[1], "__NR_") {
			if n, err := strconv.ParseUint(fs[2], 10, 32); err == nil {
				out[strings.TrimPrefix(fs[1], "__NR_")] = uint32(n)
			}
		}
	}
	if len(out) < 300 {
		t.Skipf("syscall table has %d entries", len(out))
	}
	return out
}

func kernelAtLeast(v string) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	cur := strings.SplitN(unix.ByteSliceToString(u.Release[:]), ".", 3)
	want := strings.SplitN(v, ".", 2)
	for i := range 2 {
		if i >= len(cur) || i >= len(want) {
			break
		}
		c, _ := strconv.Atoi(strings.TrimFunc(cur[i], func(r rune) bool { return r < '0' || r > '9' }))
		w, _ := strconv.Atoi(want[i])
		if c != w {
			return c > w
		}
	}
	return true
}

func (r seccompRule) appliesAMD64() bool {
	has := func(list []string, s string) bool { return slices.Contains(list, s) }
	for _, c := range r.Includes.Caps {
		if !has(dockerDefaultCaps, c) {
			return false
		}
	}
	if len(r.Includes.Arches) > 0 && !has(r.Includes.Arches, "amd64") {
		return false
	}
	if r.Includes.MinKernel != "" && !kernelAtLeast(r.Includes.MinKernel) {
		return false
	}
	for _, c := range r.Excludes.Caps {
		if has(dockerDefaultCaps, c) {
			return false
		}
	}
	return !has(r.Excludes.Arches, "amd64")
}

type sockFilter struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

const (
	bpfLdAbs  = 0x20 // BPF_LD|BPF_W|BPF_ABS
	bpfJeqK   = 0x15 // BPF_JMP|BPF_JEQ|BPF_K
	bpfAndK   = 0x54 // BPF_ALU|BPF_AND|BPF_K
	bpfRetK   = 0x06 // BPF_RET|BPF_K
	retAllow  = 0x7fff0000
	retErrno  = 0x00050000
	auditX864 = 0xc000003e
)

// compileSeccomp turns the profile's rules into a filter for x86-64, first
// match wins, everything else the default action.
func compileSeccomp(t *testing.T, p seccompProfile, nrs map[string]uint32) []sockFilter {
	t.Helper()
	ret := func(action string, errno *uint32) uint32 {
		switch action {
		case "SCMP_ACT_ALLOW":
			return retAllow
		case "SCMP_ACT_ERRNO":
			e := uint32(1)
			if errno != nil {
				e = *errno
			}
			return retErrno | e
		}
		t.Fatalf("action %q", action)
		return 0
	}
	prog := []sockFilter{
		{bpfLdAbs, 0, 0, 4}, // arch
		{bpfJeqK, 1, 0, auditX864},
		{bpfRetK, 0, 0, retErrno | 1},
	}
	for _, r := range p.Syscalls {
		if !r.appliesAMD64() {
			continue
		}
		for _, name := range r.Names {
			nr, ok := nrs[name]
			if !ok {
				continue // not an x86-64 call (chown32, ...): libseccomp skips it too
			}
			// body runs when nr matches; a failed argument check jumps to its end.
			var body []sockFilter
			var fails []int // indexes in body whose jf (or jt, when negative) goes to the end
			for _, a := range r.Args {
				lo, hi := uint32(16+8*a.Index), uint32(16+8*a.Index+4)
				switch a.Op {
				case "SCMP_CMP_EQ":
					body = append(body, sockFilter{bpfLdAbs, 0, 0, lo}, sockFilter{bpfJeqK, 0, 0, uint32(a.Value)})
					fails = append(fails, len(body)-1)
					body = append(body, sockFilter{bpfLdAbs, 0, 0, hi}, sockFilter{bpfJeqK, 0, 0, uint32(a.Value >> 32)})
					fails = append(fails, len(body)-1)
				case "SCMP_CMP_NE":
					body = append(body, sockFilter{bpfLdAbs, 0, 0, lo}, sockFilter{bpfJeqK, 0, 2, uint32(a.Value)},
						sockFilter{bpfLdAbs, 0, 0, hi}, sockFilter{bpfJeqK, 0, 0, uint32(a.Value >> 32)})
					fails = append(fails, -(len(body) - 1))
				case "SCMP_CMP_MASKED_EQ":
					body = append(body, sockFilter{bpfLdAbs, 0, 0, lo}, sockFilter{bpfAndK, 0, 0, uint32(a.Value)},
						sockFilter{bpfJeqK, 0, 0, uint32(a.ValueTwo)})
					fails = append(fails, len(body)-1)
					body = append(body, sockFilter{bpfLdAbs, 0, 0, hi}, sockFilter{bpfAndK, 0, 0, uint32(a.Value >> 32)},
						sockFilter{bpfJeqK, 0, 0, uint32(a.ValueTwo >> 32)})
					fails = append(fails, len(body)-1)
				default:
					t.Fatalf("op %q", a.Op)
				}
			}
			body = append(body, sockFilter{bpfRetK, 0, 0, ret(r.Action, r.ErrnoRet)})
			for _, f := range fails {
				if f < 0 {
					body[-f].Jt = uint8(len(body) - 1 + f)
				} else {
					body[f].Jf = uint8(len(body) - 1 - f)
				}
			}
			prog = append(prog, sockFilter{bpfLdAbs, 0, 0, 0}, sockFilter{bpfJeqK, 0, uint8(len(body)), nr})
			prog = append(prog, body...)
		}
	}
	prog = append(prog, sockFilter{bpfRetK, 0, 0, ret(p.DefaultAction, p.DefaultErrnoRet)})
	if len(prog) > 4096 {
		t.Fatalf("filter of %d instructions", len(prog))
	}
	return prog
}

// seccompHelper runs in the re-executed test binary: become the tool
// worker's unprivileged user (when started as root), make itself
// non-dumpable as the worker does, install the filter,
// then probe and run a sandboxed command with outbound network.
func seccompHelper(filterPath, ws string) {
	raw, err := os.ReadFile(filterPath)
	if err != nil {
		fmt.Println("HELPER:", err)
		os.Exit(2)
	}
	prog := make([]sockFilter, len(raw)/8)
	if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, prog); err != nil {
		fmt.Println("HELPER:", err)
		os.Exit(2)
	}
	if os.Geteuid() == 0 {
		if err := syscall.Setgroups(nil); err == nil {
			err = syscall.Setgid(65534)
			if err == nil {
				err = syscall.Setuid(65534)
			}
		}
		if err != nil {
			fmt.Println("HELPER: drop root:", err)
			os.Exit(2)
		}
	}
	// As the tool worker does once bash is configured.
	if err := ProtectProcess(); err != nil {
		fmt.Println("HELPER: protect:", err)
		os.Exit(2)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println("HELPER: no_new_privs:", err)
		os.Exit(2)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, 1 /* SET_MODE_FILTER */, 1 /* FLAG_TSYNC */, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		fmt.Println("HELPER: seccomp:", e)
		os.Exit(2)
	}
	runtime.KeepAlive(prog)
	// The filter is in force: a call Docker's default forbids fails.
	if _, _, e := unix.Syscall(unix.SYS_KEYCTL, 0, 0, 0); e != unix.EPERM {
		fmt.Println("HELPER: keyctl not refused:", e)
		os.Exit(2)
	}
	iso := Probe()
	fmt.Printf("PROBE available=%v outbound=%v reason=%s\n", iso.Available, iso.Outbound, iso.Reason)
	if !iso.Available {
		os.Exit(0)
	}
	res, err := Run(context.Background(), Spec{Command: "grep Seccomp: /proc/self/status; ip route; echo ok > w && cat w", Dir: ws,
		Network: NetworkOutbound, RequireIsolation: true, Timeout: 30 * time.Second})
	fmt.Printf("RUN err=%v exit=%d\n%s%s\n", err, res.ExitCode, res.Stdout, res.Stderr)
	os.Exit(0)
}

// TestSeccompProfileRunsSandbox enforces the profile (see above).
func TestSeccompProfileRunsSandbox(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the test's seccomp compiler knows x86-64 only")
	}
	needOutbound(t)
	nrs := syscallNumbers(t)
	p := loadProfile(t)

	// Docker's default for a container without CAP_SYS_ADMIN: the
	// profile's allowlist without the sandbox's rule, clone only without
	// CLONE_NEW* flags, clone3 ENOSYS (so libc falls back to clone), chroot
	// with CAP_SYS_CHROOT.
	docker := p
	docker.Syscalls = nil
	for _, r := range p.Syscalls {
		if !slices.Contains(r.Names, "unshare") {
			docker.Syscalls = append(docker.Syscalls, r)
		}
	}
	enosys := uint32(38)
	docker.Syscalls = append(docker.Syscalls,
		seccompRule{Names: []string{"clone"}, Action: "SCMP_ACT_ALLOW", Args: []seccompArg{{Index: 0, Value: 0x7e020000, Op: "SCMP_CMP_MASKED_EQ"}}},
		seccompRule{Names: []string{"clone3"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &enosys},
		seccompRule{Names: []string{"chroot"}, Action: "SCMP_ACT_ALLOW", Includes: seccompCond{Caps: []string{"CAP_SYS_CHROOT"}}})

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, prof seccompProfile) string {
		t.Helper()
		dir := t.TempDir()
		var buf bytes.Buffer
		if err := binary.Write(&buf, binary.LittleEndian, compileSeccomp(t, prof, nrs)); err != nil {
			t.Fatal(err)
		}
		filter := filepath.Join(dir, "filter.bpf")
		ws := filepath.Join(dir, "ws")
		if err := os.WriteFile(filter, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(ws, 0o777); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{filepath.Dir(dir), dir, ws} {
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, self, "-test.run=^$")
		// A helper that hangs dumps its goroutines into the output.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 5 * time.Second
		cmd.Env = append(os.Environ(), "SANDBOX_TEST_SECCOMP="+filter, "SANDBOX_TEST_WS="+ws, "TMPDIR="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		return string(out)
	}
	t.Run("docker default", func(t *testing.T) {
		out := run(t, docker)
		t.Logf("helper under Docker's default rules:\n%s", out)
		if !strings.Contains(out, "PROBE available=false") || !strings.Contains(out, "bwrap cannot create namespaces") {
			t.Fatalf("under Docker's default rules bwrap worked, so the loader does not reproduce Docker:\n%s", out)
		}
	})
	t.Run("toolworker profile", func(t *testing.T) {
		out := run(t, p)
		t.Logf("helper under deploy/seccomp-toolworker.json:\n%s", out)
		for _, want := range []string{"PROBE available=true outbound=true", "RUN err=<nil> exit=0", "Seccomp:\t2", "default via 10.0.2.2", "ok"} {
			if !strings.Contains(out, want) {
				t.Fatalf("under deploy/seccomp-toolworker.json the sandbox did not work (%q missing):\n%s", want, out)
			}
		}
	})
}
