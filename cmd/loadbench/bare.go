package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime/metrics"
	"time"
)

// bareCommand is the hidden subcommand that runs the bare proxy: loadbench
// starts itself with it, so that the baseline is a process of its own
// measured as gatekeeper is.
const bareCommand = "bare"

// runtimePath is where the bare proxy serves its allocation counters.
const runtimePath = "/loadbench/runtime"

// runBare serves an httputil.ReverseProxy in front of -upstream on a
// loopback port, prints the port's address as its first line, and serves
// until ctx ends (SIGTERM).
func runBare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(bareCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	upstream := fs.String("upstream", "", "the provider's base URL")
	key := fs.String("key", "", "the provider key every request carries upstream")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("-upstream %q: want http://host:port", *upstream)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Header.Set("X-Api-Key", *key)
		},
		Transport:     upstreamTransport(),
		FlushInterval: -1,
		ErrorLog:      log.New(stderr, "bare proxy: ", 0),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+runtimePath, serveAllocs)
	mux.Handle("/", fullDuplex(rp))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Fprintln(stdout, ln.Addr().String()); err != nil {
		_ = srv.Close()
		<-served
		return err
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// allocMetrics are what gatekeeper's go_memstats_alloc_bytes_total and
// go_memstats_mallocs_total are made of (the Prometheus Go collector adds
// the tiny allocations to the objects), so both processes count alike.
var allocMetrics = [...]string{"/gc/heap/allocs:bytes", "/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}

// serveAllocs writes the process's cumulative heap allocation, in bytes
// and objects, as two numbers.
func serveAllocs(w http.ResponseWriter, _ *http.Request) {
	var s [len(allocMetrics)]metrics.Sample
	for i, name := range allocMetrics {
		s[i].Name = name
	}
	metrics.Read(s[:])
	var v [len(allocMetrics)]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	fmt.Fprintf(w, "%d %d\n", v[0], v[1]+v[2])
}

// fullDuplex lets the bare proxy's transport finish reading the request
// body after the reply has begun, as gatekeeper does (proxy/turn.go). An
// HTTP/1 server otherwise drains and closes the body when the response
// header goes out; a transport still sending that body then fails its
// write and closes the upstream connection, cutting the stream
// (golang/go#40747). Without it a few streams in every run were cut.
func fullDuplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/1 servers always support it
		h.ServeHTTP(w, r)
	})
}

// upstreamTransport has the settings of gatekeeper's own upstream
// transport (proxy.newTransport), so the bare proxy pools connections to
// the mock the same way.
//
// Compression is off: the client asks for none, and gatekeeper asks the
// provider for identity on turns, while a default Transport would add
// "Accept-Encoding: gzip" on the bare proxy's behalf and have the mock
// gzip (and the proxy gunzip) every reply; that made the bare proxy
// several times slower than gatekeeper.
func upstreamTransport() *http.Transport {
	return &http.Transport{
		DisableCompression:    true,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}
