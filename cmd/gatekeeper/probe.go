package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxProbeBody bounds what a probe reads of the answer, for its message.
const maxProbeBody = 256

// runProbe GETs a URL, by default this host's /healthz, and succeeds on a
// 2xx answer: the container image has no shell or HTTP client of its own,
// so a container healthcheck runs the binary itself.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "http://127.0.0.1:8080/healthz", "the URL to GET")
	timeout := fs.Duration("timeout", 5*time.Second, "how long the answer may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *target, nil)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	msg := strings.TrimSpace(string(body))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe: %s answered %d: %s", *target, resp.StatusCode, msg)
	}
	fmt.Fprintf(stdout, "%s: %s\n", *target, msg)
	return nil
}
