// Package gkproc builds cmd/gatekeeper and runs it as its own process for
// tests that try the shipped binary from outside: the deploy files, the
// conformance corpus. Each process serves on a loopback port it picks,
// its log is kept, and it is stopped by its PID when the test ends.
package gkproc

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Build compiles cmd/gatekeeper into the test's temporary directory and
// returns the binary's path.
func Build(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(string(bytes.TrimSpace(out)))
	bin := filepath.Join(t.TempDir(), "gatekeeper")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/gatekeeper")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/gatekeeper: %v\n%s", err, b)
	}
	return bin
}

// Process is a gatekeeper serving for a test.
type Process struct {
	// Base is its URL, http://127.0.0.1:port.
	Base string
	mu   sync.Mutex
	logs strings.Builder
}

// Log is everything the process has logged so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

var listening = regexp.MustCompile(`"msg":"gatekeeper listening".*"addr":"([^"]+)"`)

// Start runs bin serve -config configPath with env (and PATH and HOME) as
// its whole environment; the config must listen on a loopback port of its
// own (127.0.0.1:0) and log JSON. It returns once the process listens, and
// stops it (SIGINT, then SIGKILL after 20 s) by its PID when the test ends.
func Start(t testing.TB, bin, configPath string, env map[string]string) *Process {
	t.Helper()
	cmd := exec.Command(bin, "serve", "-config", configPath)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{}
	addrc := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		<-read
	})
	select {
	case addr := <-addrc:
		p.Base = "http://" + addr
	case <-read:
		t.Fatalf("gatekeeper exited:\n%s", p.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("gatekeeper did not start within 30 s:\n%s", p.Log())
	}
	return p
}
