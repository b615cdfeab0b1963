package natsutil

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configures StartEmbedded.
type EmbeddedOptions struct {
	// StoreDir is the JetStream directory (required; tests pass t.TempDir()).
	StoreDir string
	// Listen is the client listen address. "" = no TCP listener: only in-process connections
	// (Embedded.Connect). "127.0.0.1:0" picks a free loopback port (see ClientURL), which lets
	// tools such as `agentbus chat` reach the server from another terminal.
	Listen string
	// ServerName (default "agentbus-embedded").
	ServerName string
	// MaxMemory and MaxStore cap JetStream resources (0 = the server's defaults).
	MaxMemory int64
	MaxStore  int64
	// Token, or User and Password, require clients to authenticate (set them whenever Listen
	// is not loopback: whoever can publish agent.in.> can claim any sender role). Embedded.Connect
	// presents them itself.
	Token    string
	User     string
	Password string
	// RoleUsers, with User and Password, gives the server one more user per bus role
	// (BusRoles, with the role's permissions and a fresh random password kept in memory only):
	// `agentbus up` runs each role in-process as its own user (ConnectRole), as a deployment
	// does with deploy/nats-auth.conf. User stays the unrestricted (admin) user.
	RoleUsers bool
	// MaxPayload raises the largest message the server accepts (0 = the server default, 1 MB).
	MaxPayload int32
	// Logger receives the server's logs (nil = no server logs). Debug enables its debug logs.
	Logger *slog.Logger
	Debug  bool
	// ReadyTimeout bounds the wait for the server to accept connections (default 10s).
	ReadyTimeout time.Duration
}

// Embedded is a running in-process nats-server with JetStream.
type Embedded struct {
	srv       *server.Server
	auth      nats.Option       // credentials for in-process clients, nil without auth
	roles     map[string]string // role -> password (RoleUsers)
	closeOnce sync.Once
}

// StartEmbedded starts a nats-server with JetStream in this process and waits until it accepts
// connections. Close shuts it down and waits for it to finish, so the store directory can be
// reopened (or removed) right after.
func StartEmbedded(opts EmbeddedOptions) (*Embedded, error) {
	if opts.StoreDir == "" {
		return nil, fmt.Errorf("%w: embedded server needs a store dir", ErrConfig)
	}
	name := opts.ServerName
	if name == "" {
		name = "agentbus-embedded"
	}
	so := &server.Options{
		ServerName:         name,
		JetStream:          true,
		StoreDir:           opts.StoreDir,
		JetStreamMaxMemory: opts.MaxMemory,
		JetStreamMaxStore:  opts.MaxStore,
		NoSigs:             true,
		NoLog:              opts.Logger == nil,
		Debug:              opts.Debug,
		Authorization:      opts.Token,
		Username:           opts.User,
		Password:           opts.Password,
		MaxPayload:         opts.MaxPayload,
	}
	if opts.Token != "" && opts.User != "" {
		return nil, fmt.Errorf("%w: embedded server: use a token or user/password, not both", ErrConfig)
	}
	var roles map[string]string
	if opts.RoleUsers {
		if opts.User == "" || opts.Password == "" {
			return nil, fmt.Errorf("%w: embedded server: role users need an admin user and password", ErrConfig)
		}
		if IsBusRole(opts.User) || opts.User == RoleAdmin {
			return nil, fmt.Errorf("%w: embedded server: the admin user may not be named %q (a role's name)", ErrConfig, opts.User)
		}
		users := []*server.User{{Username: opts.User, Password: opts.Password}}
		roles = map[string]string{}
		for _, r := range BusRoles() {
			if !IsBusRole(r.Name) {
				continue
			}
			pw, err := randomPassword()
			if err != nil {
				return nil, err
			}
			roles[r.Name] = pw
			users = append(users, &server.User{Username: r.Name, Password: pw, Permissions: r.Permissions()})
		}
		so.Users, so.Username, so.Password = users, "", ""
	}
	if opts.Listen == "" {
		so.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(opts.Listen)
		if err != nil {
			return nil, fmt.Errorf("%w: listen %q: %w", ErrConfig, opts.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("%w: listen %q: bad port", ErrConfig, opts.Listen)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		so.Host, so.Port = host, p
	}
	srv, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if opts.Logger != nil {
		srv.SetLoggerV2(&slogAdapter{l: opts.Logger.With("component", "nats-server")}, opts.Debug, false, false)
	}
	srv.Start()
	wait := opts.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("%w: embedded server not ready after %s", ErrNotReady, wait)
	}
	e := &Embedded{srv: srv, roles: roles}
	switch {
	case opts.Token != "":
		e.auth = nats.Token(opts.Token)
	case opts.User != "":
		e.auth = nats.UserInfo(opts.User, opts.Password)
	}
	return e, nil
}

// Server returns the underlying server.
func (e *Embedded) Server() *server.Server { return e.srv }

// ClientURL returns nats://host:port when the server listens on TCP, "" when it is in-process only.
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Connect opens an in-process client connection (no TCP, works with or without a listener).
// Options are applied after the defaults (name, reconnect forever).
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := []nats.Option{nats.Name("agentbus"), nats.InProcessServer(e.srv), nats.MaxReconnects(-1), nats.SyncQueueLen(SyncQueueLen),
		asyncErrors(slog.Default().With("component", "nats"))}
	if e.auth != nil {
		all = append(all, e.auth)
	}
	all = append(all, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("connect in-process: %w", err)
	}
	return nc, nil
}

// HasRoleUsers reports whether the server has a user per bus role (EmbeddedOptions.RoleUsers).
func (e *Embedded) HasRoleUsers() bool { return e.roles != nil }

// ConnectRole opens an in-process connection as role's user (EmbeddedOptions.RoleUsers), with
// the role's inbox prefix (InboxPrefix), as Connect does otherwise.
func (e *Embedded) ConnectRole(role string, opts ...nats.Option) (*nats.Conn, error) {
	pw, ok := e.roles[role]
	if !ok {
		return nil, fmt.Errorf("%w: embedded server has no user for role %q", ErrConfig, role)
	}
	all := append([]nats.Option{nats.Name("agentbus " + role), nats.UserInfo(role, pw),
		nats.CustomInboxPrefix(InboxPrefix(role))}, opts...)
	return e.Connect(all...)
}

// Close shuts the server down and waits until it has stopped. Safe to call more than once.
func (e *Embedded) Close() error {
	e.closeOnce.Do(func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	})
	return nil
}

// slogAdapter routes nats-server logs to slog.
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
