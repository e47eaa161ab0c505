package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"gatekeeper/approvals"
	"gatekeeper/config"
)

// finalWrites is what a stopping gatekeeper takes past shutdown_grace to
// end the streams still open and write their charges (cmd/gatekeeper's
// finalWrites): whatever stops it must wait for both.
const finalWrites = 5 * time.Second

// configPath is the config both deployments run; the Kubernetes ConfigMap
// holds the same bytes.
const configPath = "config.yaml"

// tool finds a command-line tool the test needs, or skips, loudly, and
// fails instead when CI is set: the CI script installs it.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not on PATH, and CI is set: the CI script installs it (Debian package %s)", name, pkg)
		}
		t.Skipf("SKIPPED: %s is not on PATH; install the Debian package %s to run this check", name, pkg)
	}
	return p
}

// runTool runs a tool in dir, with env added to the environment, with a
// bound on its time, and fails with its output.
func runTool(t *testing.T, dir string, env []string, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s %s did not end within 2 minutes:\n%s", filepath.Base(bin), strings.Join(args, " "), out.String())
	}
	return out.String()
}

// docs decodes every YAML document of a file.
func docs(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

// at walks m along a path of keys (strings) and indexes (ints), failing
// the test when a step is missing or of the wrong kind.
func at(t *testing.T, m any, path ...any) any {
	t.Helper()
	cur := m
	for i, step := range path {
		switch s := step.(type) {
		case string:
			mm, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %v", path, path[:i])
			}
			if cur, ok = mm[s]; !ok {
				t.Fatalf("%v: no %q at %v", path, s, path[:i])
			}
		case int:
			l, ok := cur.([]any)
			if !ok || s >= len(l) {
				t.Fatalf("%v: no item %d at %v", path, s, path[:i])
			}
			cur = l[s]
		}
	}
	return cur
}

func str(t *testing.T, m any, path ...any) string {
	t.Helper()
	s, ok := at(t, m, path...).(string)
	if !ok {
		t.Fatalf("%v: not a string: %v", path, at(t, m, path...))
	}
	return s
}

func num(t *testing.T, m any, path ...any) int {
	t.Helper()
	n, ok := at(t, m, path...).(int)
	if !ok {
		t.Fatalf("%v: not an integer: %v", path, at(t, m, path...))
	}
	return n
}

// references are the variables the config's values refer to (not its
// comments), split by whether they have a default.
func references(t *testing.T, cfg []byte) (required, optional []string) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal(cfg, &root); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode {
			for _, m := range re.FindAllStringSubmatch(n.Value, -1) {
				l := &required
				if m[2] != "" {
					l = &optional
				}
				if !slices.Contains(*l, m[1]) {
					*l = append(*l, m[1])
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	if len(required) == 0 {
		t.Fatal("the config refers to no variable without a default: where are its keys?")
	}
	return required, optional
}

// checkConfig validates cfg as gatekeeper serve does (config.Parse,
// Validate, and the gates' CEL), with the variables env sets.
func checkConfig(t *testing.T, cfg []byte, env map[string]string) *config.Config {
	t.Helper()
	c, err := config.Parse(cfg, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("config does not parse: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("config does not validate with %v set:\n%v", keys(env), err)
	}
	if _, err := approvals.Compile(c.Gates); err != nil {
		t.Fatalf("config's gates do not compile: %v", err)
	}
	return c
}

// refused checks that cfg is refused, naming each variable in unset, when
// env leaves them unset.
func refused(t *testing.T, cfg []byte, env map[string]string, unset []string) {
	t.Helper()
	c, err := config.Parse(cfg, func(k string) string { return env[k] })
	if err == nil {
		err = c.Validate()
	}
	if err == nil {
		t.Fatalf("config validates with %v unset", unset)
	}
	for _, v := range unset {
		if !strings.Contains(err.Error(), v+" is not set") {
			t.Errorf("the refusal does not name %s:\n%v", v, err)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// secretValue is what the tests put in a secret variable: long enough for
// an admin token, unlike any other.
func secretValue(name string) string { return "test-value-of-" + strings.ToLower(name) }

// listenPort is the port of a listen address.
func listenPort(t *testing.T, addr string) int {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	p, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("listen address %q has no port", addr)
	}
	return p
}

// redisHost is the host of a redis:// URL.
func redisHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "redis" {
		t.Fatalf("%q is not a redis:// URL (%v)", raw, err)
	}
	return u.Hostname()
}

func duration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

// hasArgs reports whether list holds want in order, one after the other.
func hasArgs(list []any, want ...string) bool {
	for i := 0; i+len(want) <= len(list); i++ {
		ok := true
		for j, w := range want {
			ok = ok && fmt.Sprint(list[i+j]) == w
		}
		if ok {
			return true
		}
	}
	return false
}
