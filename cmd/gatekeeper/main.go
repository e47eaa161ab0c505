// Command gatekeeper runs the proxy, the bundled mock provider, config
// checks, and the admin API's command-line client.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "gatekeeper:", err)
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errReported marks an error already printed for the user.
var errReported = errors.New("reported")

const usage = `usage: gatekeeper COMMAND [flags]

  serve          [-config config.yaml]                  run the proxy
  mock-provider  [-addr 127.0.0.1:9090] [-script FILE] [-rpm N] [-input-tpm N] [-output-tpm N] [-quantum D]
                 a scripted fake model provider, optionally rate-limited per key
  check-config   [-config config.yaml]                  exit 1 with every problem listed
  trajectories   ls | show ID                           read trajectory records (admin API)
                 pause|resume|cancel|kill|finish ID     control a run and its subagents
                 interrupt ID MESSAGE                   a message to the run at its next turn
  tenants        [NAME]                                 tenants' limits, spend per window and live runs (admin API)
  approvals      ls | show ID                           read approval requests (admin API)
                 approve|deny ID [-reason TEXT]         vote on a held tool call
  report costs   [-tenant T] [-class C] [-since D]      cost-vs-success curves, knees and suggested ceilings
                 [-format text|json|csv|svg]            of the runs marked accepted or rejected (admin API)
  gates test     [-config config.yaml] < calls.json     which gates hold sample tool calls, and why
  login          [-issuer URL -client-id ID] [-scopes S]  sign in with the identity provider (device flow)
                 -print-token                           print a valid access token, refreshed as needed
  logout                                                revoke and forget the sign-in
  probe          [-url http://127.0.0.1:8080/healthz] [-timeout 5s]
                 exit 0 when the URL answers 2xx (a container's healthcheck)

The admin verbs read GATEKEEPER_URL (default http://127.0.0.1:8080) and
GATEKEEPER_ADMIN_TOKEN, and print JSON with -json.
`

// command is one entry of the CLI's dispatch table.
type command struct {
	name string
	// verbs are what the command takes as its first argument; none when
	// it takes flags only.
	verbs []string
	run   func(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error
}

// commands is the CLI's dispatch table. docs/reference/cli.md documents
// every command and verb here, and a test holds the two to each other.
var commands = []command{
	{name: "serve", run: func(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, _, stderr io.Writer) error {
		return runServe(ctx, args, getenv, stderr)
	}},
	{name: "mock-provider", run: func(ctx context.Context, args []string, _ func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
		return runMock(ctx, args, stdout, stderr)
	}},
	{name: "check-config", run: func(_ context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
		return runCheckConfig(args, getenv, stdout, stderr)
	}},
	{name: "trajectories", verbs: []string{"ls", "show", "pause", "resume", "cancel", "kill", "finish", "interrupt", "budget"},
		run: func(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
			return runTrajectories(ctx, args, getenv, stdout, stderr)
		}},
	{name: "tenants", run: func(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
		return runTenants(ctx, args, getenv, stdout, stderr)
	}},
	{name: "approvals", verbs: []string{"ls", "show", "approve", "deny"},
		run: func(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
			return runApprovals(ctx, args, getenv, stdout, stderr)
		}},
	{name: "report", verbs: []string{"costs"},
		run: func(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
			return runReport(ctx, args, getenv, stdout, stderr)
		}},
	{name: "gates", verbs: []string{"test"},
		run: func(_ context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
			return runGates(args, getenv, stdin, stdout, stderr)
		}},
	{name: "login", run: func(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
		return runLogin(ctx, args, getenv, stdout, stderr)
	}},
	{name: "logout", run: func(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, _, stderr io.Writer) error {
		return runLogout(ctx, args, getenv, stderr)
	}},
	{name: "probe", run: func(ctx context.Context, args []string, _ func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
		return runProbe(ctx, args, stdout, stderr)
	}},
}

// run is the whole program; main only wires the process to it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		// A command's own usage answers a missing verb; an unknown one is
		// refused here, for every command alike.
		if len(c.verbs) > 0 && len(args) > 1 && !slices.Contains(c.verbs, args[1]) {
			return fmt.Errorf("unknown verb %q: use %s", args[1], orList(c.verbs))
		}
		return c.run(ctx, args[1:], getenv, os.Stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "gatekeeper: unknown command %q\n\n%s", args[0], usage)
	return flag.ErrHelp
}

// orList writes words as "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
