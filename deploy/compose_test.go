package deploy_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gatekeeper/config"
)

func itoa(n int) string { return strconv.Itoa(n) }

// TestCompose: compose.yaml runs two replicas of the repository's image on
// one Redis with its append-only file on; each passes every variable the
// config needs without a default, listens where its healthcheck and port
// mapping look, mounts config.yaml where its command reads it, reaches
// Redis by the service's name, and is given longer to stop than
// shutdown_grace and the final writes. The config, with those variables
// set, passes gatekeeper's own validation; without them it is refused,
// naming each.
func TestCompose(t *testing.T) {
	f := docs(t, "compose.yaml")[0]
	cfg, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	required, _ := references(t, cfg)
	if len(required) < 5 {
		t.Fatalf("the config needs only %q", required)
	}
	services := at(t, f, "services").(map[string]any)

	redis := services["redis"]
	if redis == nil {
		t.Fatal("no redis service")
	}
	if cmd := at(t, redis, "command").([]any); !hasArgs(cmd, "--appendonly", "yes") {
		t.Errorf("redis runs %v, without --appendonly yes", cmd)
	}
	if hc := at(t, redis, "healthcheck", "test").([]any); !hasArgs(hc, "redis-cli", "ping") {
		t.Errorf("redis healthcheck %v", hc)
	}

	var replicas []string
	for name, svc := range services {
		build, ok := svc.(map[string]any)["build"]
		if !ok {
			continue
		}
		if str(t, build, "context") != ".." || str(t, build, "dockerfile") != "Dockerfile" {
			t.Errorf("%s is built from %v, not the repository's Dockerfile", name, build)
		}
		t.Run(name, func(t *testing.T) {
			env := map[string]string{}
			var passed []string // set from the shell that runs compose
			for k, v := range at(t, svc, "environment").(map[string]any) {
				if v == nil {
					// Unset in the shell, a variable with a default in
					// the config takes it; the tests set the others.
					passed = append(passed, k)
					if slices.Contains(required, k) {
						env[k] = secretValue(k)
					}
					continue
				}
				env[k] = v.(string)
			}
			replicas = append(replicas, env["GATEKEEPER_REPLICA"])
			for _, v := range required {
				if _, ok := env[v]; !ok {
					t.Errorf("%s does not pass %s, which the config needs", name, v)
				}
			}
			port := listenPort(t, env["GATEKEEPER_LISTEN"])
			hc := at(t, svc, "healthcheck", "test").([]any)
			if !hasArgs(hc, "CMD", "/gatekeeper", "probe", "-url", "http://127.0.0.1:"+itoa(port)+"/healthz") {
				t.Errorf("healthcheck %v does not probe /healthz on port %d", hc, port)
			}
			published := false
			for _, p := range at(t, svc, "ports").([]any) {
				published = published || strings.HasSuffix(p.(string), ":"+itoa(port))
			}
			if !published {
				t.Errorf("ports %v do not reach the listen port %d", at(t, svc, "ports"), port)
			}
			cmd := at(t, svc, "command").([]any)
			if !hasArgs(cmd, "serve", "-config", "/etc/gatekeeper/config.yaml") {
				t.Errorf("command %v", cmd)
			}
			mounted := false
			for _, v := range at(t, svc, "volumes").([]any) {
				mounted = mounted || v == "./"+configPath+":/etc/gatekeeper/config.yaml:ro"
			}
			if !mounted {
				t.Errorf("volumes %v do not mount %s where the command reads it", at(t, svc, "volumes"), configPath)
			}
			if h := redisHost(t, env["GATEKEEPER_REDIS_URL"]); services[h] == nil {
				t.Errorf("GATEKEEPER_REDIS_URL names host %q, no service", h)
			}
			if c := str(t, svc, "depends_on", "redis", "condition"); c != "service_healthy" {
				t.Errorf("starts with redis %s", c)
			}

			c := checkConfig(t, cfg, env)
			if c.Store.Kind != config.StoreRedis {
				t.Errorf("store.kind %s: two replicas share nothing without Redis", c.Store.Kind)
			}
			stop := duration(t, str(t, svc, "stop_grace_period"))
			if need := c.ShutdownGrace.Std() + finalWrites; stop <= need {
				t.Errorf("stop_grace_period %v, not past shutdown_grace %v and the final writes %v", stop, c.ShutdownGrace, finalWrites)
			}
			for _, v := range passed {
				delete(env, v)
			}
			var unset []string
			for _, v := range required {
				if _, ok := env[v]; !ok {
					unset = append(unset, v)
				}
			}
			refused(t, cfg, env, unset)
		})
	}
	if len(replicas) != 2 || replicas[0] == replicas[1] || replicas[0] == "" {
		t.Errorf("replicas named %q: want two, each its own GATEKEEPER_REPLICA", replicas)
	}
}

// TestComposeConfig: docker-compose itself accepts compose.yaml, without a
// Docker daemon.
func TestComposeConfig(t *testing.T) {
	bin := tool(t, "docker-compose", "docker-compose")
	runTool(t, ".", []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"}, bin, "-f", "compose.yaml", "config", "-q")
}
