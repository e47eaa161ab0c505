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
  probe          [-url http://127.0.0.1:8080/healthz] [-timeout 5s]
                 exit 0 when the URL answers 2xx (a container's healthcheck)

The admin verbs read GATEKEEPER_URL (default http://127.0.0.1:8080) and
GATEKEEPER_ADMIN_TOKEN, and print JSON with -json.
`

// run is the whole program; main only wires the process to it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], getenv, stderr)
	case "mock-provider":
		return runMock(ctx, args[1:], stdout, stderr)
	case "check-config":
		return runCheckConfig(args[1:], getenv, stdout, stderr)
	case "trajectories":
		return runTrajectories(ctx, args[1:], getenv, stdout, stderr)
	case "tenants":
		return runTenants(ctx, args[1:], getenv, stdout, stderr)
	case "approvals":
		return runApprovals(ctx, args[1:], getenv, stdout, stderr)
	case "report":
		return runReport(ctx, args[1:], getenv, stdout, stderr)
	case "gates":
		return runGates(args[1:], getenv, os.Stdin, stdout, stderr)
	case "probe":
		return runProbe(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "gatekeeper: unknown command %q\n\n%s", args[0], usage)
	return flag.ErrHelp
}
