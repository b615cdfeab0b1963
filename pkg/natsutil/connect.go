package natsutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connect opens a client connection from the nats: config block: URL (comma-separated list),
// credentials (creds file, nkey seed file, user/password or token), and TLS (client cert/key,
// CA). It reconnects forever (MaxReconnects -1) and logs connection state changes with slog
// (slog.Default, component=nats); server URLs are logged redacted and secrets never are.
//
// ctx bounds the initial connect (its deadline becomes the dial timeout). extra options are
// applied last and may override any default.
func Connect(ctx context.Context, cfg config.NATS, extra ...nats.Option) (*nats.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.URL) == "" {
		return nil, fmt.Errorf("%w: nats.url is required (or set nats.embedded: true)", ErrConfig)
	}
	opts, err := clientOptions(ctx, cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redactURLs(cfg.URL), err)
	}
	return nc, nil
}

// SyncQueueLen is the queue of each synchronous subscription on agentbus's connections.
// nats.go's default gives every SubscribeSync a 65,536-slot channel: 512 KiB allocated and
// zeroed for each batched direct get (orbit.go's GetBatch subscribes synchronously for its
// answers), which a cold session start makes several of; at 2,000 sessions starting together
// that was most of a gigabyte of heap. agentbus's sync subscriptions receive at most one page
// of a batched get (pkg/store pages by 512) and its end marker, or one tool result, so 1,024
// slots are room enough: a subscription that overflowed would report a slow consumer, not
// lose a message silently.
const SyncQueueLen = 1024

func clientOptions(ctx context.Context, cfg config.NATS) ([]nats.Option, error) {
	log := slog.Default().With("component", "nats")
	opts := []nats.Option{
		nats.Name("agentbus"),
		nats.MaxReconnects(-1),
		nats.SyncQueueLen(SyncQueueLen),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				log.Warn("nats connection closed", "err", err)
			}
		}),
		asyncErrors(log),
	}
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 {
			opts = append(opts, nats.Timeout(d))
		}
	}
	switch {
	case cfg.Creds != "":
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	case cfg.NKeySeed != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeed)
		if err != nil {
			// The error text never contains the seed itself, only the path.
			return nil, fmt.Errorf("%w: nats.nkeySeed %s: %w", ErrConfig, cfg.NKeySeed, err)
		}
		opts = append(opts, o)
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
		if IsBusRole(cfg.User) {
			// A role's user may hear replies only below its own prefix (BusRoles).
			opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(cfg.User)))
		}
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLS.Cert != "" || cfg.TLS.Key != "" {
		if cfg.TLS.Cert == "" || cfg.TLS.Key == "" {
			return nil, fmt.Errorf("%w: nats.tls.cert and nats.tls.key must be set together", ErrConfig)
		}
		opts = append(opts, nats.ClientCert(cfg.TLS.Cert, cfg.TLS.Key))
	}
	if cfg.TLS.CA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLS.CA))
	}
	return opts, nil
}

// redactURLs hides passwords and tokens in a comma-separated URL list.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if at := strings.LastIndexByte(p, '@'); at >= 0 {
			scheme := ""
			if j := strings.Index(p, "://"); j >= 0 && j < at {
				scheme, p, at = p[:j+3], p[j+3:], at-(j+3)
			}
			p = scheme + "[REDACTED]" + p[at:]
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// Bus is an open connection to the bus: the client, its JetStream context and, in the
// single-machine default, the embedded server it runs on.
type Bus struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Embedded *Embedded // nil when connected to an external server
}

// Open connects as cfg says: with cfg.Embedded it starts an embedded server in cfg.StoreDir
// (listening on cfg.Listen when set, requiring cfg.Token or cfg.User/Password from clients when
// set) and connects in-process; otherwise it Connects to cfg.URL.
// Then it provisions every stream and bucket (SpecFromConfig(cfg)). logger may be nil.
func Open(ctx context.Context, cfg config.NATS, logger *slog.Logger) (*Bus, error) {
	b := &Bus{}
	var err error
	if cfg.Embedded {
		b.Embedded, err = StartEmbedded(EmbeddedOptions{StoreDir: cfg.StoreDir, Listen: cfg.Listen, Logger: logger,
			Token: cfg.Token, User: cfg.User, Password: cfg.Password})
		if err != nil {
			return nil, err
		}
		b.NC, err = b.Embedded.Connect()
	} else {
		b.NC, err = Connect(ctx, cfg)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	if b.JS, err = jetstream.New(b.NC); err != nil {
		b.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b.JS = FastPublish(b.JS, 0)
	if err := Provision(ctx, b.JS, SpecFromConfig(cfg)); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Close drains the connection (in-flight publishes and acks finish) and stops the embedded
// server, if any.
func (b *Bus) Close() error {
	var errs []error
	if b.NC != nil {
		if err := b.NC.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
		// Drain is asynchronous; wait (bounded) so the server shutdown does not cut it off.
		deadline := time.Now().Add(5 * time.Second)
		for !b.NC.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		b.NC.Close()
	}
	if b.Embedded != nil {
		errs = append(errs, b.Embedded.Close())
	}
	return errors.Join(errs...)
}

// asyncErrors logs the connection's asynchronous errors (slow consumers, failed consumer
// resets); without it nats.go prints them to stderr.
func asyncErrors(log *slog.Logger) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		attrs := []any{"err", err}
		if sub != nil {
			attrs = append(attrs, "subject", sub.Subject)
		}
		log.Error("nats async error", attrs...)
	})
}
