// Package redistest runs a real redis-server for tests: a child process on a
// loopback port, with nothing persisted, killed when the test ends.
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

// portAttempts bounds the retries when another process takes the free port
// between picking it and redis-server binding it.
const portAttempts = 3

// Server is one redis-server child process.
type Server struct {
	// URL is the redis:// URL of database 0.
	URL  string
	Addr string

	cmd    *exec.Cmd
	exited chan struct{} // closed once Wait returned
	out    *syncBuffer

	stopOnce sync.Once
}

// Start runs a redis-server for t and returns its URL. The server is killed
// when t ends.
func Start(t testing.TB) (url string) {
	t.Helper()
	return StartServer(t).URL
}

// StartServer runs a redis-server for t. The server is killed when t ends;
// Stop kills it earlier, to test what a client does when Redis goes away.
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not on PATH, and CI is set: the CI script installs it (%v)", err)
		}
		t.Skipf("redis-server is not on PATH; install it to run the Redis tests (%v)", err)
	}
	dir := t.TempDir()
	var errs []error
	for range portAttempts {
		s, err := start(bin, dir)
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

// start runs one server on a port that was free a moment ago, and waits
// until it answers PING.
func start(bin, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--logfile", "")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{
		URL:    "redis://" + addr + "/0",
		Addr:   addr,
		cmd:    cmd,
		exited: make(chan struct{}),
		out:    &syncBuffer{},
	}
	ready := make(chan struct{})
	go s.watch(stdout, ready)

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-s.exited:
		return nil, fmt.Errorf("exited before accepting connections on %s:\n%s", addr, s.out.String())
	case <-timer.C:
		_ = s.Stop()
		return nil, fmt.Errorf("not ready on %s after %v:\n%s", addr, startTimeout, s.out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
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

// Flush empties every database of the server, so a test starts clean.
func (s *Server) Flush(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr})
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL %s: %v", s.Addr, err)
	}
}

// Output is what the server has logged so far.
func (s *Server) Output() string { return s.out.String() }

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
