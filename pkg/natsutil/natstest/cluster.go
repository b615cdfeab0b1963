package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of in-process nats-servers routed to each other on loopback.
type Cluster struct {
	Servers []*server.Server
	// URLs lists every node's client URL, comma-separated (for nats.Connect).
	URLs string
}

// NewCluster starts n clustered JetStream servers on loopback, each with a store in
// t.TempDir(), waits for a meta leader, and shuts them down in t.Cleanup. Streams and buckets
// are not provisioned: tests create what they need with the replicas they want.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	clusterPorts := freePorts(t, n)
	routes := make([]string, n)
	for i, p := range clusterPorts {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	c := &Cluster{}
	var urls []string
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		}
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = "natstest", "127.0.0.1", clusterPorts[i]
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("natstest: cluster node %d: %v", i+1, err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("natstest: cluster node %d not ready", i+1)
		}
		c.Servers = append(c.Servers, s)
		urls = append(urls, s.ClientURL())
	}
	c.URLs = strings.Join(urls, ",")
	c.waitMetaLeader(t)
	return c
}

// Connect dials the cluster (closed in t.Cleanup).
func (c *Cluster) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(c.URLs)
	if err != nil {
		t.Fatalf("natstest: connect cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

func (c *Cluster) waitMetaLeader(t testing.TB) {
	t.Helper()
	_, js := c.Connect(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: no JetStream meta leader: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	out := make([]int, 0, n)
	lns := make([]net.Listener, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}
