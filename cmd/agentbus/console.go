package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/webconsole"
)

// cmdConsole runs the web console (pkg/webconsole) against a deployment's bus. Not to be
// confused with `agentbus chat`, the terminal chat client of the "console" IM platform.
func cmdConsole(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	bus := addBusFlags(fs)
	path := fs.String("config", "", "config file: console.listen, console.token, and the configuration /config shows (default ./agentbus.yml when present)")
	listen := fs.String("listen", "", "address to serve on (default console.listen, else "+config.DefaultConsoleListen+")")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `agentbus console — the web console: sessions, each turn's causal chain (model calls, tool
calls, deliveries), live updates, forks against another model, dead letters, the configuration.
It reads the bus only (any deployment: --nats URL and the credentials as for sessions/replay),
keeps no state, and any number of consoles may run. It prints a login URL with a token; the
token is console.token, or one generated into DIR/console.token (mode 0600).

Usage:
  agentbus console [flags]

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), clientEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	var cfg *config.Config
	if *path != "" || fileExists("agentbus.yml") {
		c, err := loadConfig(*path)
		if err != nil {
			return err
		}
		cfg = c
	}
	addr := *listen
	if addr == "" && cfg != nil {
		addr = cfg.Console.Listen
	}
	if addr == "" || strings.EqualFold(addr, "off") {
		addr = config.DefaultConsoleListen
	}
	configured := ""
	if cfg != nil {
		configured = cfg.Console.Token
	}
	token, err := webconsole.LoadToken(*bus.dataDir, configured)
	if err != nil {
		return err
	}
	nc, js, err := connectJS(bus)
	if err != nil {
		return err
	}
	defer nc.Close()
	ln, err := startConsole(ctx, js, cfg, token, addr, slog.Default())
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "agentbus console is running.")
	ln.Banner(w, token)
	fmt.Fprintln(w, "Stop with Ctrl-C.")
	return ln.Serve(ctx)
}

func startConsole(ctx context.Context, js jetstream.JetStream, cfg *config.Config, token, addr string, log *slog.Logger) (*webconsole.Listener, error) {
	srv, err := webconsole.New(ctx, webconsole.Options{JS: js, Token: token, Config: cfg, Log: log})
	if err != nil {
		return nil, err
	}
	return webconsole.Listen(addr, srv)
}

// upConsole serves the console from `agentbus up` on console.listen (default
// config.DefaultConsoleListen; "off" turns it off) until ctx ends. A default address that is
// taken (another agentbus up) is a warning, not a failure; an address set on purpose fails.
func upConsole(ctx context.Context, p *app.Process, out io.Writer, log *slog.Logger) {
	cfg := p.Config
	addr, explicit := cfg.Console.Listen, cfg.Console.Listen != ""
	if strings.EqualFold(addr, "off") {
		return
	}
	if addr == "" {
		addr = config.DefaultConsoleListen
	}
	token, err := webconsole.LoadToken(cfg.DataDir, cfg.Console.Token)
	if err != nil {
		log.Error("console not started", "err", err)
		return
	}
	ln, err := startConsole(ctx, p.JS, cfg, token, addr, log)
	if err != nil {
		if explicit {
			log.Error("console not started (console.listen)", "err", err)
		} else {
			log.Warn("console not started; set console.listen to another address", "err", err)
		}
		return
	}
	ln.Banner(out, token)
	go func() {
		if err := ln.Serve(ctx); err != nil {
			log.Error("console", "err", err)
		}
	}()
}
