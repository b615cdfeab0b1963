package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
)

// busFlags are the flags of the client commands (chat, sessions, replay) that say which bus
// to talk to.
type busFlags struct {
	url, dataDir *string
}

func addBusFlags(fs *flag.FlagSet) busFlags {
	dd := os.Getenv("AGENTBUS_DATA_DIR")
	if dd == "" {
		dd = config.DefaultDataDir
	}
	return busFlags{
		url:     fs.String("nats", "", "NATS `URL` (default: $AGENTBUS_NATS_URL, else the URL \"agentbus up\" recorded in the data directory, else nats://127.0.0.1:4222)"),
		dataDir: fs.String("data", dd, "data `directory` of the local \"agentbus up\" (to find its server)"),
	}
}

// busTarget is where a client command connects and how it found out.
type busTarget struct {
	URL  string
	From string // "--nats", "AGENTBUS_NATS_URL", "data/nats.url" or "default"
	Opts []nats.Option
}

// discoverBus is the one place a client command finds the bus: --nats, else AGENTBUS_NATS_URL,
// else the URL a local `agentbus up` recorded in its data directory (it moves off 4222 when
// that port is taken), else the default port. Connection options the bus needs (credentials
// kept in the data directory) belong here too.
func discoverBus(f busFlags) (busTarget, error) {
	switch {
	case *f.url != "":
		return busTarget{URL: *f.url, From: "--nats"}, nil
	case os.Getenv("AGENTBUS_NATS_URL") != "":
		return busTarget{URL: os.Getenv("AGENTBUS_NATS_URL"), From: "AGENTBUS_NATS_URL"}, nil
	}
	u, err := app.ReadURLFile(*f.dataDir)
	if err != nil {
		return busTarget{}, fmt.Errorf("read the server URL from %s: %w", filepath.Join(*f.dataDir, app.URLFile), err)
	}
	if u != "" {
		return busTarget{URL: u, From: filepath.Join(*f.dataDir, app.URLFile)}, nil
	}
	return busTarget{URL: "nats://" + app.DefaultNATSListen, From: "default"}, nil
}

// dial connects to the discovered bus; the error says where the URL came from and what to do.
func dial(f busFlags, name string, opts ...nats.Option) (*nats.Conn, busTarget, error) {
	t, err := discoverBus(f)
	if err != nil {
		return nil, t, err
	}
	all := append([]nats.Option{nats.Name(name), nats.Timeout(5 * time.Second)}, t.Opts...)
	nc, err := nats.Connect(t.URL, append(all, opts...)...)
	if err != nil {
		hint := "is `agentbus up` running? start it, or pass --nats URL"
		if t.From != "default" {
			hint = "the URL is from " + t.From + "; is that server running?"
		}
		return nil, t, fmt.Errorf("connect %s: %w (%s)", redact(t.URL), err, hint)
	}
	return nc, t, nil
}

// redact hides the user info (a token or user:password) of each URL in a list, for messages.
func redact(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = url.User("***")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
