package webconsole

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Listener is a console bound to its address.
type Listener struct {
	ln  net.Listener
	srv *http.Server
	url string
}

// Listen binds addr for the console. It does not serve yet (Serve).
func Listen(addr string, h http.Handler) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("webconsole: listen %s: %w", addr, err)
	}
	host := ln.Addr().String()
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		host = net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
	}
	return &Listener{ln: ln, url: "http://" + host,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// URL is the console's base URL (http://host:port).
func (l *Listener) URL() string { return l.url }

// Addr is the bound address.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// LoginURL is the URL that logs in with token.
func (l *Listener) LoginURL(token string) string { return l.url + "/?token=" + token }

// Banner prints where the console is and how to log in, and says loudly when it is reachable
// from other machines.
func (l *Listener) Banner(w io.Writer, token string) {
	fmt.Fprintf(w, "  Console:          %s\n", l.LoginURL(token))
	if !IsLoopback(l.Addr()) {
		fmt.Fprintf(w, "  WARNING: the console listens on %s, not on loopback: anyone who can reach this address\n"+
			"           and has the token reads every chat. Put TLS and a firewall in front of it.\n", l.Addr())
	}
}

// Serve serves until ctx ends, then shuts down (requests in flight get 5 s; live streams end).
func (l *Listener) Serve(ctx context.Context) error {
	// Requests end with ctx, so live streams do not hold the shutdown up.
	l.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	done := make(chan error, 1)
	go func() { done <- l.srv.Serve(l.ln) }()
	select {
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.srv.Shutdown(sctx); err != nil {
		_ = l.srv.Close()
	}
	<-done
	return nil
}
