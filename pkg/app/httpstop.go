package app

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// webhookServer is the ingest HTTP server with a stop that suits a webhook endpoint: requests
// being answered finish (their message is being stored), connections that carry none are
// closed at once. http.Server.Shutdown alone waits up to 5 s for a connection that was
// opened but never used, which platforms and HTTP clients leave behind routinely.
type webhookServer struct {
	srv      *http.Server
	inFlight atomic.Int64
}

func newWebhookServer(h http.Handler) *webhookServer {
	s := &webhookServer{}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		h.ServeHTTP(w, r)
	})}
	return s
}

// stop stops accepting connections, waits up to limit for the requests in flight, then closes
// every connection.
func (s *webhookServer) stop(limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.srv.Shutdown(ctx) // closes the listener and idle connections, waits for the rest
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if s.inFlight.Load() == 0 {
				_ = s.srv.Close()
				<-done
				return
			}
		}
	}
}
