package childproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Node is one nats-server with JetStream to run as a child process: a cluster member when
// Routes is set, a single server otherwise. Env and NodeFromEnv carry it to the child.
type Node struct {
	Name        string
	Port        int      // client port on 127.0.0.1
	ClusterPort int      // route port on 127.0.0.1 (0: not clustered)
	Routes      []string // the other members' route URLs
	StoreDir    string
	// User and Password, when set, are the one user every client must present. A node started
	// from a configuration file (StartNode's base) takes its users from there instead.
	User, Password string
}

// ClientURL is the node's client URL.
func (n Node) ClientURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

const (
	envNodeName    = "AGENTBUS_NODE_NAME"
	envNodePort    = "AGENTBUS_NODE_PORT"
	envNodeCluster = "AGENTBUS_NODE_CLUSTER_PORT"
	envNodeRoutes  = "AGENTBUS_NODE_ROUTES"
	envNodeDir     = "AGENTBUS_NODE_DIR"
	envNodeUser    = "AGENTBUS_NODE_USER"
	envNodePass    = "AGENTBUS_NODE_PASSWORD"
)

// Env is the environment that hands n to a child (NodeFromEnv reads it back).
func (n Node) Env() []string {
	return []string{envNodeName + "=" + n.Name, envNodePort + "=" + strconv.Itoa(n.Port),
		envNodeCluster + "=" + strconv.Itoa(n.ClusterPort), envNodeRoutes + "=" + strings.Join(n.Routes, ","),
		envNodeDir + "=" + n.StoreDir, envNodeUser + "=" + n.User, envNodePass + "=" + n.Password}
}

// NodeFromEnv is the Node a parent handed over with Env.
func NodeFromEnv() (Node, error) {
	n := Node{Name: os.Getenv(envNodeName), StoreDir: os.Getenv(envNodeDir),
		User: os.Getenv(envNodeUser), Password: os.Getenv(envNodePass)}
	var err error
	if n.Port, err = strconv.Atoi(os.Getenv(envNodePort)); err != nil {
		return n, fmt.Errorf("childproc: %s: %w", envNodePort, err)
	}
	if n.ClusterPort, err = strconv.Atoi(os.Getenv(envNodeCluster)); err != nil {
		return n, fmt.Errorf("childproc: %s: %w", envNodeCluster, err)
	}
	if r := os.Getenv(envNodeRoutes); r != "" {
		n.Routes = strings.Split(r, ",")
	}
	return n, nil
}

// PlanNodes picks free loopback ports for n nodes named <prefix>1..<prefix>n with stores under
// dir; with n > 1 they are routed to each other as one cluster.
func PlanNodes(n int, prefix, dir, user, password string) ([]Node, error) {
	ports, err := FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{Name: fmt.Sprintf("%s%d", prefix, i+1), Port: ports[i],
			StoreDir: filepath.Join(dir, fmt.Sprintf("%s%d", prefix, i+1)), User: user, Password: password}
		if n > 1 {
			nodes[i].ClusterPort = ports[n+i]
			for j := range n {
				if j != i {
					nodes[i].Routes = append(nodes[i].Routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+j]))
				}
			}
		}
	}
	return nodes, nil
}

// URLs joins the nodes' client URLs with commas, as nats.Connect takes them.
func URLs(nodes []Node) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.ClientURL()
	}
	return strings.Join(urls, ",")
}

// StartNode starts n in this process and waits until it accepts connections. base, when not
// nil, holds the settings every node shares (e.g. from server.ProcessConfigFile); it is
// modified. The caller shuts the server down.
func StartNode(n Node, base *server.Options) (*server.Server, error) {
	opts := base
	if opts == nil {
		opts = &server.Options{}
	}
	opts.ServerName = n.Name
	opts.JetStream = true
	opts.StoreDir = n.StoreDir
	opts.Host, opts.Port = "127.0.0.1", n.Port
	opts.HTTPPort = 0
	if n.ClusterPort != 0 {
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = "agentbus", "127.0.0.1", n.ClusterPort
		opts.Routes = server.RoutesFromStr(strings.Join(n.Routes, ","))
	}
	if n.User != "" && base == nil {
		opts.Username, opts.Password = n.User, n.Password
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("childproc: nats node %s: %w", n.Name, err)
	}
	go s.Start()
	if !s.ReadyForConnections(60 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("childproc: nats node %s not ready after 60s", n.Name)
	}
	return s, nil
}

// WaitJetStream waits until JetStream answers at urls (a cluster has elected its meta leader),
// at most until ctx ends.
func WaitJetStream(ctx context.Context, urls string, opts ...nats.Option) error {
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		return fmt.Errorf("childproc: connect %s: %w", urls, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("childproc: no JetStream at %s: %w", urls, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	out := make([]int, 0, n)
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("childproc: free port: %w", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
