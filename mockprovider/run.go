package mockprovider

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// shutdownGrace is how long Run lets replies in flight finish before it
// closes their connections.
const shutdownGrace = 5 * time.Second

// Run serves a mock provider on addr (e.g. "127.0.0.1:0") until ctx is
// done, then shuts down gracefully. ready, when not nil, gets the bound
// address once the listener accepts connections.
func Run(ctx context.Context, addr string, opts Options, ready func(addr string)) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           New(opts),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("mock provider listening", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Streams still running past the grace period are cut.
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
