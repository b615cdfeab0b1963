//go:build unix

package childproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/internal/testwait"
)

const childEnv = "CHILDPROC_TEST_CHILD"

// TestMain plays the children the tests start (this binary re-executed).
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "ready":
		fmt.Println("a line before the ready line")
		Ready("k=v x=y")
		<-ParentGone() // SIGTERM (the default action) or the parent's end stops it
		os.Exit(0)
	case "parent": // starts a grandchild and tells its pid
		g, err := Start(Spec{Name: "grandchild", Args: []string{"-test.run=^$"}, Env: []string{childEnv + "=ready"}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if _, err := g.WaitReady(60 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		Ready(fmt.Sprint(g.Pid()))
		<-ParentGone()
		os.Exit(0)
	case "fail":
		fmt.Fprintln(os.Stderr, "cannot start: no luck")
		os.Exit(1)
	case "node":
		n, err := NodeFromEnv()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		s, err := StartNode(n, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		Ready("")
		<-ParentGone()
		s.Shutdown()
		os.Exit(0)
	}
	os.Exit(3)
}

func start(t *testing.T, kind string, env ...string) *Proc {
	t.Helper()
	p, err := Start(Spec{Name: kind, Args: []string{"-test.run=^$"}, Env: append([]string{childEnv + "=" + kind}, env...),
		Log: filepath.Join(t.TempDir(), kind+".log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestProcLifecycle(t *testing.T) {
	p := start(t, "ready")
	info, err := p.WaitReady(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info != "k=v x=y" {
		t.Errorf("ready info %q", info)
	}
	pid := p.Pid()
	if pid <= 0 || !alive(pid) {
		t.Fatalf("pid %d not running", pid)
	}
	p.Kill()
	if alive(pid) {
		t.Errorf("pid %d alive after Kill", pid)
	}
	if err := p.Respawn(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Pid() == pid {
		t.Error("respawn kept the old pid")
	}
	p.Stop(10 * time.Second)
	select {
	case <-p.Exited():
	default:
		t.Error("not exited after Stop")
	}
	if !strings.Contains(Tail(p.LogPath(), 5), "a line before the ready line") {
		t.Errorf("stdout before the ready line not in the log: %q", Tail(p.LogPath(), 5))
	}
}

// TestNoOrphans kills a child with SIGKILL and checks that its own child goes too.
func TestNoOrphans(t *testing.T) {
	p := start(t, "parent")
	info, err := p.WaitReady(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	if _, err := fmt.Sscan(info, &grandchild); err != nil || !alive(grandchild) {
		t.Fatalf("grandchild %q not running (%v)", info, err)
	}
	p.Kill()
	testwait.Eventually(t, 0, func() error {
		if !alive(grandchild) {
			return nil
		}
		// A zombie (killed, not yet reaped by init) still answers kill 0; its state says.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", grandchild))
		return testwait.Want(err == nil && strings.Contains(string(b), ") Z "), "grandchild %d still running after its parent was killed", grandchild)
	})
}

func TestWaitReadyReportsExit(t *testing.T) {
	p := start(t, "fail")
	_, err := p.WaitReady(60 * time.Second)
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "no luck") {
		t.Fatalf("err = %v, want ErrExited with the log's tail", err)
	}
}

// TestCluster starts three nodes as child processes, routed into one JetStream cluster.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes")
	}
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			nodes, err := PlanNodes(n, "n", t.TempDir(), "u", "p")
			if err != nil {
				t.Fatal(err)
			}
			for _, node := range nodes {
				if len(node.Routes) != n-1 {
					t.Errorf("%s routes %v", node.Name, node.Routes)
				}
				p := start(t, "node", node.Env()...)
				if _, err := p.WaitReady(60 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if err := WaitJetStream(ctx, URLs(nodes), nats.UserInfo("u", "p")); err != nil {
				t.Fatal(err)
			}
			// Without the user, no connection.
			if nc, err := nats.Connect(URLs(nodes)); err == nil {
				nc.Close()
				t.Error("connected without credentials")
			}
		})
	}
}
