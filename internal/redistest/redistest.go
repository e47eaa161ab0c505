// Package redistest runs real redis-server processes for tests: one server,
// or a three-master Redis Cluster, as child processes on loopback ports,
// with nothing persisted, killed when the test ends.
//
// Tests that need Redis skip when redis-server is not installed, unless the
// CI environment variable is set: CI installs it, so its absence there is a
// failure, not a reason to skip.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// startTimeout bounds how long one server may take to accept commands.
const startTimeout = 5 * time.Second

// restartTimeout bounds a restart, which loads the data the server had.
const restartTimeout = time.Minute

// portAttempts bounds the retries when another process takes the free port
// between picking it and redis-server binding it.
const portAttempts = 3

// Server is one redis-server child process.
type Server struct {
	// URL is the redis:// URL of database 0, with the password if the
	// server requires one.
	URL  string
	Addr string
	// Password is what the server requires ("--requirepass"), or "".
	Password string

	cmd    *exec.Cmd
	exited chan struct{} // closed once Wait returned
	out    *syncBuffer

	bin, dir string // what Restart runs again
	port     int
	extra    []string

	stopOnce sync.Once
}

// Start runs a redis-server for t and returns its URL. The server is killed
// when t ends.
func Start(t testing.TB) (url string) {
	t.Helper()
	return StartServer(t).URL
}

// StartServer runs a redis-server for t, with extra command-line
// arguments (e.g. "--enable-debug-command", "yes"). The server is killed
// when t ends; Stop kills it earlier, to test what a client does when
// Redis goes away.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := lookup(t)
	dir := t.TempDir()
	var errs []error
	for range portAttempts {
		s, err := start(bin, dir, extra...)
		if err == nil {
			t.Cleanup(func() {
				if err := s.Stop(); err != nil {
					t.Errorf("redis-server %s: %v", s.Addr, err)
				}
			})
			return s
		}
		errs = append(errs, err)
	}
	t.Fatalf("redis-server did not start: %v", errors.Join(errs...))
	return nil
}

// start runs one server on a port that was free a moment ago, with the
// extra arguments, and waits until it answers PING.
func start(bin, dir string, extra ...string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return startOn(bin, dir, port, startTimeout, extra...)
}

// startOn runs one server on port and waits up to wait for it to accept
// commands.
func startOn(bin, dir string, port int, wait time.Duration, extra ...string) (*Server, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--logfile", "",
	}, extra...)
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{
		Addr:     addr,
		Password: password(extra),
		cmd:      cmd,
		exited:   make(chan struct{}),
		out:      &syncBuffer{},
		bin:      bin,
		dir:      dir,
		port:     port,
		extra:    extra,
	}
	s.URL = "redis://" + userinfo(s.Password) + addr + "/0"
	ready := make(chan struct{})
	go s.watch(stdout, ready)

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ready:
	case <-s.exited:
		return nil, fmt.Errorf("exited before accepting connections on %s:\n%s", addr, s.out.String())
	case <-timer.C:
		_ = s.Stop()
		return nil, fmt.Errorf("not ready on %s after %v:\n%s", addr, wait, s.out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c := goredis.NewClient(&goredis.Options{Addr: addr, Password: s.Password, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("PING %s: %w\n%s", addr, err, s.out.String())
	}
	return s, nil
}

// watch copies the server's output and signals ready when the server says
// it accepts connections, so the caller waits on an event, not a poll.
// It reaps the process once its output ends.
func (s *Server) watch(r io.Reader, ready chan<- struct{}) {
	sc := bufio.NewScanner(r)
	signaled := false
	for sc.Scan() {
		line := sc.Text()
		s.out.WriteLine(line)
		if !signaled && strings.Contains(line, "Ready to accept connections") {
			signaled = true
			close(ready)
		}
	}
	_, _ = io.Copy(io.Discard, r)
	_ = s.cmd.Wait()
	close(s.exited)
}

// Stop kills the server by its PID and waits for it to exit. It may be
// called more than once.
func (s *Server) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		if kerr := s.cmd.Process.Kill(); kerr != nil && !errors.Is(kerr, os.ErrProcessDone) {
			err = kerr
		}
		timer := time.NewTimer(startTimeout)
		defer timer.Stop()
		select {
		case <-s.exited:
		case <-timer.C:
			err = fmt.Errorf("pid %d still running %v after kill", s.cmd.Process.Pid, startTimeout)
		}
	})
	return err
}

// Signal sends sig to the server's process: SIGSTOP and SIGCONT stall it
// as a frozen host would.
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Restart kills the server (SIGKILL, nothing flushed beyond what its
// persistence settings wrote) and starts it again on the same port, in the
// same directory, with the same arguments. It returns once the new server
// accepts commands, its data loaded; the new one is killed when t ends.
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	n, err := startOn(s.bin, s.dir, s.port, restartTimeout, s.extra...)
	if err != nil {
		t.Fatalf("restarting redis-server: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("redis-server %s: %v", n.Addr, err)
		}
	})
	return n
}

// Flush empties every database of the server, so a test starts clean.
func (s *Server) Flush(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr, Password: s.Password})
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL %s: %v", s.Addr, err)
	}
}

// Output is what the server has logged so far.
func (s *Server) Output() string { return s.out.String() }

// password is the value of "--requirepass" among a server's arguments.
func password(args []string) string {
	for i, a := range args {
		if a == "--requirepass" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// userinfo is the part of a URL before the host that carries password.
func userinfo(password string) string {
	if password == "" {
		return ""
	}
	return ":" + url.QueryEscape(password) + "@"
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer keeps the server's log for failure messages; watch writes it
// while the test may read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// maxLog bounds the kept log: only its start says why a server failed.
const maxLog = 64 << 10

func (s *syncBuffer) WriteLine(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < maxLog {
		s.b.WriteString(line)
		s.b.WriteByte('\n')
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Target is a Redis a test runs against: one server or a cluster.
type Target struct {
	// Name is "single" or "cluster", the subtest's name.
	Name string
	// URL is the server's URL, or the cluster's in go-redis's cluster
	// form.
	URL string
	// Cluster reports a Redis Cluster: clients must be cluster clients.
	Cluster bool
	// Flush empties it.
	Flush func(testing.TB)
}

// Each runs fn as two subtests of t: on one redis-server ("single") and on
// a three-master cluster ("cluster"), each started for it.
func Each(t *testing.T, fn func(t *testing.T, r Target)) {
	t.Run("single", func(t *testing.T) {
		s := StartServer(t)
		fn(t, Target{Name: "single", URL: s.URL, Flush: s.Flush})
	})
	t.Run("cluster", func(t *testing.T) {
		c := StartCluster(t)
		fn(t, Target{Name: "cluster", URL: c.URL, Cluster: true, Flush: c.Flush})
	})
}

// Client returns a client of r that the test closes when it ends: a
// cluster client for a cluster. MaxRetries is off, so a test sees every
// failure.
func (r Target) Client(t testing.TB) goredis.UniversalClient {
	t.Helper()
	var c goredis.UniversalClient
	if r.Cluster {
		o, err := goredis.ParseClusterURL(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		c = goredis.NewClusterClient(o)
	} else {
		o, err := goredis.ParseURL(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		c = goredis.NewClient(o)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
