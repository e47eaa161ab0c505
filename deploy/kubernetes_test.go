package deploy_test

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"gatekeeper/config"
)

// manifests reads kustomization.yaml and every resource it lists, by
// kind/name; it fails when a manifest in the directory is not listed.
func manifests(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	k := docs(t, filepath.Join(dir, "kustomization.yaml"))[0]
	var listed []string
	for _, r := range at(t, k, "resources").([]any) {
		listed = append(listed, r.(string))
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(listed, b) {
			t.Errorf("%s is not in kustomization.yaml's resources", b)
		}
	}
	objs := map[string]map[string]any{}
	for _, r := range listed {
		for _, o := range docs(t, filepath.Join(dir, r)) {
			id := str(t, o, "kind") + "/" + str(t, o, "metadata", "name")
			if objs[id] != nil {
				t.Errorf("%s twice", id)
			}
			if str(t, o, "apiVersion") == "" {
				t.Errorf("%s has no apiVersion", id)
			}
			objs[id] = o
		}
	}
	return objs
}

// object is the manifest of kind/name, or fails.
func object(t *testing.T, objs map[string]map[string]any, id string) map[string]any {
	t.Helper()
	o := objs[id]
	if o == nil {
		t.Fatalf("no %s among the manifests", id)
	}
	return o
}

// selects reports whether a label selector's matchLabels (or a Service's
// selector) all hold in labels.
func selects(sel, labels any) bool {
	s, _ := sel.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

// portOf resolves a probe's or Service's port, by name or number, among a
// container's ports.
func portOf(t *testing.T, p any, ports map[string]int) int {
	t.Helper()
	switch v := p.(type) {
	case int:
		return v
	case string:
		n, ok := ports[v]
		if !ok {
			t.Fatalf("no container port named %q", v)
		}
		return n
	}
	t.Fatalf("port %v", p)
	return 0
}

// TestKubernetes: the manifests kustomization.yaml lists parse; the
// Deployment runs two replicas of gatekeeper with readiness on /readyz and
// liveness on /healthz at the port it listens on, the ConfigMap's
// config.yaml mounted where its args read it, every variable the config
// needs from the Secret or its own env, and a termination grace past
// shutdown_grace, its preStop pause and the final writes; the ConfigMap's
// config is config.yaml byte for byte and passes gatekeeper's own
// validation with the Secret filled in (and is refused, naming them, with
// the Secret as shipped); the Service and the PodDisruptionBudget select
// its pods; Redis runs with its append-only file on, where the replicas
// look for it.
func TestKubernetes(t *testing.T) {
	objs := manifests(t, "kubernetes")
	dep := object(t, objs, "Deployment/gatekeeper")
	replicas := num(t, dep, "spec", "replicas")
	if replicas != 2 {
		t.Errorf("%d replicas, want 2", replicas)
	}
	pod := at(t, dep, "spec", "template")
	podLabels := at(t, pod, "metadata", "labels")
	if !selects(at(t, dep, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("the Deployment's selector does not select its pods")
	}
	c := at(t, pod, "spec", "containers", 0)
	ports := map[string]int{}
	for _, p := range at(t, c, "ports").([]any) {
		ports[str(t, p, "name")] = num(t, p, "containerPort")
	}
	env := map[string]string{}
	for _, e := range at(t, c, "env").([]any) {
		if v, ok := e.(map[string]any)["value"]; ok {
			env[str(t, e, "name")] = v.(string)
		} else {
			env[str(t, e, "name")] = "from-" + str(t, e, "valueFrom", "fieldRef", "fieldPath")
		}
	}
	listen := listenPort(t, env["GATEKEEPER_LISTEN"])

	for _, p := range []struct{ probe, path string }{{"readinessProbe", "/readyz"}, {"livenessProbe", "/healthz"}} {
		if got := str(t, c, p.probe, "httpGet", "path"); got != p.path {
			t.Errorf("%s on %s, want %s", p.probe, got, p.path)
		}
		if got := portOf(t, at(t, c, p.probe, "httpGet", "port"), ports); got != listen {
			t.Errorf("%s on port %d; gatekeeper listens on %d", p.probe, got, listen)
		}
	}

	// The config: mounted from the ConfigMap where the args read it.
	args := at(t, c, "args").([]any)
	if !hasArgs(args, "serve", "-config") {
		t.Fatalf("args %v", args)
	}
	cfgFile := args[slices.Index(args, any("-config"))+1].(string)
	var volume string
	for _, m := range at(t, c, "volumeMounts").([]any) {
		if str(t, m, "mountPath") == path.Dir(cfgFile) {
			volume = str(t, m, "name")
		}
	}
	var cmName string
	for _, v := range at(t, pod, "spec", "volumes").([]any) {
		if str(t, v, "name") == volume {
			cmName = str(t, v, "configMap", "name")
		}
	}
	cm := object(t, objs, "ConfigMap/"+cmName)
	cfgText, ok := at(t, cm, "data").(map[string]any)[path.Base(cfgFile)].(string)
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", cmName, path.Base(cfgFile))
	}
	want, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfgText != string(want) {
		t.Errorf("the ConfigMap's %s is not %s byte for byte", path.Base(cfgFile), configPath)
	}
	cfg := []byte(cfgText)

	// The Secret: every variable the config needs without a default is in
	// it or set by the Deployment.
	var secretName string
	for _, e := range at(t, c, "envFrom").([]any) {
		secretName = str(t, e, "secretRef", "name")
	}
	secret := at(t, object(t, objs, "Secret/"+secretName), "stringData").(map[string]any)
	required, _ := references(t, cfg)
	filled := map[string]string{}
	for k, v := range env {
		filled[k] = v
	}
	asShipped := map[string]string{}
	for k, v := range env {
		asShipped[k] = v
	}
	var unset []string
	for k, v := range secret {
		filled[k] = secretValue(k)
		asShipped[k] = v.(string)
		if v == "" && slices.Contains(required, k) {
			unset = append(unset, k)
		}
	}
	for _, v := range required {
		if _, ok := filled[v]; !ok {
			t.Errorf("the config needs %s: neither the Secret nor the Deployment sets it", v)
		}
	}
	c2 := checkConfig(t, cfg, filled)
	refused(t, cfg, asShipped, unset)
	if c2.Store.Kind != config.StoreRedis {
		t.Errorf("store.kind %s: two replicas share nothing without Redis", c2.Store.Kind)
	}

	grace := time.Duration(num(t, pod, "spec", "terminationGracePeriodSeconds")) * time.Second
	pause := time.Duration(num(t, c, "lifecycle", "preStop", "sleep", "seconds")) * time.Second
	if need := c2.ShutdownGrace.Std() + pause + finalWrites; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v, not past shutdown_grace %v + preStop %v + final writes %v", grace, c2.ShutdownGrace, pause, finalWrites)
	}

	svc := object(t, objs, "Service/gatekeeper")
	if !selects(at(t, svc, "spec", "selector"), podLabels) {
		t.Error("the Service does not select the gatekeeper pods")
	}
	if got := portOf(t, at(t, svc, "spec", "ports", 0, "targetPort"), ports); got != listen {
		t.Errorf("the Service targets port %d; gatekeeper listens on %d", got, listen)
	}
	pdb := object(t, objs, "PodDisruptionBudget/gatekeeper")
	if !selects(at(t, pdb, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("the PodDisruptionBudget does not select the gatekeeper pods")
	}
	if m := num(t, pdb, "spec", "minAvailable"); m < 1 || m >= replicas {
		t.Errorf("minAvailable %d of %d replicas: a drain must leave one and may take one", m, replicas)
	}

	host := redisHost(t, env["GATEKEEPER_REDIS_URL"])
	rsvc := object(t, objs, "Service/"+host)
	rset := object(t, objs, "StatefulSet/"+host)
	if !selects(at(t, rsvc, "spec", "selector"), at(t, rset, "spec", "template", "metadata", "labels")) {
		t.Errorf("Service %s does not select Redis's pods", host)
	}
	if !hasArgs(at(t, rset, "spec", "template", "spec", "containers", 0, "args").([]any), "--appendonly", "yes") {
		t.Error("Redis runs without --appendonly yes")
	}
	if num(t, rset, "spec", "replicas") != 1 {
		t.Error("the Redis StatefulSet is one instance, not replicated: more would be separate stores")
	}
}
