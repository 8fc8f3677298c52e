package instance_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"go.yaml.in/yaml/v3"
)

// seriesName finds the lockproxy series a PromQL expression uses.
var seriesName = regexp.MustCompile(`\blockproxy_[a-z_]+`)

// TestDeployFiles parses deploy/ — no Docker engine runs here — and checks
// that every lockproxy series the dashboard and the alerts use is one a
// real instance serves.
func TestDeployFiles(t *testing.T) {
	used := map[string]string{} // series -> the file using it
	for _, e := range dashboardExprs(t) {
		for _, s := range seriesName.FindAllString(e, -1) {
			used[s] = "grafana-dashboard.json"
		}
	}
	for _, e := range alertExprs(t) {
		for _, s := range seriesName.FindAllString(e, -1) {
			used[s] = "alerts.yml"
		}
	}
	checkCompose(t)
	served := servedFamilies(t)
	for s, file := range used {
		base := s
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(s, suffix); ok && served[b] == "histogram" {
				base = b
			}
		}
		if served[base] == "" {
			t.Errorf("%s uses %s, which /metrics does not serve", file, s)
		}
	}
	if len(used) < 8 {
		t.Fatalf("only %d series found in deploy/: %v", len(used), used)
	}
}

func readDeploy(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../deploy/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dashboardExprs are the Grafana dashboard's queries.
func dashboardExprs(t *testing.T) []string {
	var d struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(readDeploy(t, "grafana-dashboard.json"), &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	return exprs
}

// alertExprs are the alert rules' expressions; every rule is named, has a
// severity and a summary.
func alertExprs(t *testing.T) []string {
	var f struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr, For string
				Labels           map[string]string
				Annotations      map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(readDeploy(t, "alerts.yml"), &f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var exprs []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alerts.yml: incomplete rule %+v", r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	if len(exprs) == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	return exprs
}

// checkCompose: three Redis nodes fsyncing every write, two lockproxy
// instances over all three with the password from an env file, and
// Prometheus scraping both with the alert rules.
func checkCompose(t *testing.T) {
	var c struct {
		Services map[string]struct {
			Image, Build string
			Command      []string
			EnvFile      string `yaml:"env_file"`
			Volumes      []string
		}
	}
	if err := yaml.Unmarshal(readDeploy(t, "docker-compose.yml"), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"redis-a", "redis-b", "redis-c"} {
		cmd := strings.Join(c.Services[name].Command, " ")
		if !strings.Contains(cmd, "--appendfsync always") || !strings.Contains(cmd, "--appendonly yes") {
			t.Errorf("compose %s: command %q lacks appendonly with appendfsync always", name, cmd)
		}
	}
	for _, name := range []string{"lockproxy-1", "lockproxy-2"} {
		s := c.Services[name]
		cmd := strings.Join(s.Command, " ")
		if s.Build == "" || s.EnvFile != "lockproxy.env" || !strings.Contains(cmd, "--nodes redis-a:6379,redis-b:6379,redis-c:6379") {
			t.Errorf("compose %s: %+v", name, s)
		}
	}
	prom := c.Services["prometheus"]
	if !slices.Contains(prom.Volumes, "./prometheus.yml:/etc/prometheus/prometheus.yml:ro") ||
		!slices.Contains(prom.Volumes, "./alerts.yml:/etc/prometheus/alerts.yml:ro") {
		t.Errorf("compose prometheus volumes: %v", prom.Volumes)
	}
	var p struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(readDeploy(t, "prometheus.yml"), &p); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	var targets []string
	for _, sc := range p.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	if !slices.Equal(targets, []string{"lockproxy-1:9121", "lockproxy-2:9121"}) || !slices.Equal(p.RuleFiles, []string{"/etc/prometheus/alerts.yml"}) {
		t.Errorf("prometheus.yml: targets %v rule files %v", targets, p.RuleFiles)
	}
}

// servedFamilies are the lockproxy metric families, name -> type, that a
// real instance serves once it has granted, refused, and lost its quorum.
func servedFamilies(t *testing.T) map[string]string {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.MetricsListen = "127.0.0.1:0"
	in := startInstance(t, cfg)
	a, b := newClient(t, in.Addr(), 2), newClient(t, in.Addr(), 2)
	key := uniqueKey(t)
	mustLock(t, a, key, "PX", 60000)
	lock(t.Context(), b, key, "PX", 60000)
	nodes[0].Kill()
	nodes[1].Kill()
	lock(t.Context(), b, uniqueKey(t), "PX", 60000)
	_, page := httpGet(t, in.MetricsAddr(), "/metrics")
	families := map[string]string{}
	for _, l := range strings.Split(page, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[1] == "TYPE" {
			families[f[2]] = f[3]
		}
	}
	return families
}
