package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ),
// 100 a second on every Linux the benchmark runs on.
const clockTicks = 100

// stopTimeout is how long a process gets to exit after SIGTERM before it
// is killed.
const stopTimeout = 15 * time.Second

// startTimeout bounds a process's start, until it serves.
const startTimeout = time.Minute

// proc is one process the benchmark started: gatekeeper or the bare proxy.
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed once Wait has returned
	err    error         // Wait's error, read after exited
	log    string        // the file its stdout and stderr go to
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// startProc starts cmd with stdout and stderr in logPath unless cmd
// already has a stdout, and waits for it in the background.
func startProc(name string, cmd *exec.Cmd, logPath string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	if cmd.Stdout == nil {
		cmd.Stdout = f
	}
	cmd.Stderr = f
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.exited)
	}()
	return p, nil
}

// stop ends the process by its PID: SIGTERM, then SIGKILL past
// stopTimeout. A process that had already exited is not an error here;
// run reports it when its requests fail.
func (p *proc) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.name, p.pid(), err)
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("%s (pid %d) did not exit %s after SIGTERM and was killed", p.name, p.pid(), stopTimeout)
}

// logTail is the end of the process's log, to say why it failed.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// procCPU is the CPU time (user and system, every thread) process pid has
// used so far, from /proc/PID/stat; resolution 10 ms.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/PID/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses itself: fields are counted after the
// last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command name in %.100q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is f[11], stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > maxSeconds*clockTicks {
			return 0, fmt.Errorf("/proc stat: CPU ticks %q", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procRSS is the resident set of process pid in bytes (VmRSS).
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseRSS(b)
}

// parseRSS reads the VmRSS line of /proc/PID/status ("VmRSS:  1234 kB").
func parseRSS(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc status: VmRSS is %q", v)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > 1<<40 {
			return 0, fmt.Errorf("/proc status: VmRSS is %q", v)
		}
		return kb << 10, nil
	}
	return 0, errors.New("/proc status: no VmRSS line")
}

// loadAverage is the first three fields of /proc/loadavg, or why not.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// buildGatekeeper builds the binary users run, the plain way: no build
// tags, no flags.
func buildGatekeeper(ctx context.Context, src, dir string) (string, error) {
	bin := filepath.Join(dir, "gatekeeper")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/gatekeeper")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/gatekeeper in %s: %w\n%s", src, err, out)
	}
	return bin, nil
}

// moduleRoot is the directory of the go.mod the working directory is in.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: run from the repository or pass -src")
	}
	return filepath.Dir(mod), nil
}

// listenLine finds gatekeeper's "gatekeeper listening" log line, in either
// log format, and the address in it.
var listenLine = regexp.MustCompile(`gatekeeper listening.*?addr[=":]+"?(127\.0\.0\.1:[0-9]+)`)

// waitListening reads the process's log until gatekeeper says where it
// listens, it exits, or startTimeout passes.
func waitListening(ctx context.Context, p *proc) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(p.log); err == nil {
			if m := listenLine.FindSubmatch(b); m != nil {
				return string(m[1]), nil
			}
		}
		select {
		case <-p.exited:
			return "", fmt.Errorf("%s exited before it listened: %v\n%s", p.name, p.err, p.logTail())
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not listen within %s: %w\n%s", p.name, startTimeout, ctx.Err(), p.logTail())
		case <-tick.C:
		}
	}
}

// readAddr reads the first line the bare proxy prints: its address.
func readAddr(ctx context.Context, p *proc, r io.Reader) (string, error) {
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case addr := <-got:
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			return "", fmt.Errorf("%s printed %q, not its address\n%s", p.name, addr, p.logTail())
		}
		return addr, nil
	case <-t.C:
		return "", fmt.Errorf("%s did not print its address within %s\n%s", p.name, startTimeout, p.logTail())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// sourceCommit names the commit gatekeeper was built from, "+dirty" when
// the tree had changes, or why it cannot.
func sourceCommit(ctx context.Context, src string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", src, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	commit := strings.TrimSpace(string(out))
	st, err := exec.CommandContext(ctx, "git", "-C", src, "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += "+dirty"
	}
	return commit
}
