package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// busFlags are the connection flags of chat, sessions and replay.
type busFlags struct {
	url     *string
	dataDir *string
}

func addBusFlags(fs *flag.FlagSet) busFlags {
	dd := os.Getenv("AGENTBUS_DATA_DIR")
	if dd == "" {
		dd = "data"
	}
	return busFlags{
		url: fs.String("nats", os.Getenv("AGENTBUS_NATS_URL"), "NATS `URL` of a running agentbus (default: the one \"agentbus up\" recorded in the data directory ("+
			natsutil.CredentialsFile+", "+app.URLFile+"), else nats://127.0.0.1:4222)"),
		dataDir: fs.String("data", dd, "data `directory` of \"agentbus up\": where its server's URL and credentials are"),
	}
}

// dial is the one place chat, sessions and replay find the bus, connecting like a person
// expects: to --nats (or AGENTBUS_NATS_URL) if given, else to the URL `agentbus up` wrote into
// the data directory (it moves off 4222 when that port is taken), else to the default port;
// with the user and password kept in the data directory (unless the URL carries its own). opts
// are applied last. A failure says where the URL came from and what to do.
func (b busFlags) dial(name string, opts ...nats.Option) (*nats.Conn, error) {
	url, from := strings.TrimSpace(*b.url), "--nats"
	all := []nats.Option{nats.Name(name), nats.Timeout(5 * time.Second)}
	path := filepath.Join(*b.dataDir, natsutil.CredentialsFile)
	creds, err := natsutil.ReadCredentials(path)
	switch {
	case err == nil:
		if url == "" && creds.URL != "" {
			url, from = creds.URL, path
		}
		if !strings.Contains(url, "@") {
			all = append(all, nats.UserInfo(creds.User, creds.Password))
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	if url == "" {
		u, err := app.ReadURLFile(*b.dataDir)
		if err != nil {
			return nil, fmt.Errorf("read the server URL from %s: %w", filepath.Join(*b.dataDir, app.URLFile), err)
		}
		url, from = u, filepath.Join(*b.dataDir, app.URLFile)
	}
	if url == "" {
		url, from = "nats://"+app.DefaultNATSListen, ""
	}
	nc, err := nats.Connect(url, append(all, opts...)...)
	if err != nil {
		hint := " (is `agentbus up` running? start it, or pass --nats URL or --data DIR)"
		if from != "" {
			hint = " (the URL is from " + from + "; is that server running?)"
		}
		if errors.Is(err, nats.ErrAuthorization) {
			hint = fmt.Sprintf(" (credentials: %s; run from the directory of `agentbus up` or pass --data)", path)
		}
		return nil, fmt.Errorf("connect %s: %w%s", redact(url), err, hint)
	}
	return nc, nil
}

// redact hides the user info (a token or user:password) of each URL in a list, for messages.
func redact(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = neturl.User("***")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
