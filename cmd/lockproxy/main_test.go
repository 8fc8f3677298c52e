package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/instance"
)

// TestExampleConfigIsTheDefault: config.example.toml documents every key
// with its default, so loading it changes nothing.
func TestExampleConfigIsTheDefault(t *testing.T) {
	cfg, err := configure([]string{"--config", "../../config.example.toml"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := instance.Default()
	want.Redlock.Nodes, want.ZooKeeper.Servers = []string{}, []string{}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("example config differs from the defaults:\n got %+v\nwant %+v", cfg, want)
	}
}

func TestFlagsOverrideTheFile(t *testing.T) {
	file := writeConfig(t, `listen = "127.0.0.1:7000"
backend = "embedded"
metrics_listen = "127.0.0.1:9000"
[redlock]
nodes = ["127.0.0.1:1"]
node_timeout_ms = 250
`)
	cfg, err := configure([]string{"--config", file, "--listen", "127.0.0.1:7001", "--backend", "redlock",
		"--nodes", "127.0.0.1:2,127.0.0.1:3,127.0.0.1:4"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:7001" || cfg.Backend != "redlock" || len(cfg.Redlock.Nodes) != 3 ||
		cfg.MetricsListen != "127.0.0.1:9000" || cfg.Redlock.NodeTimeoutMS != 250 {
		t.Fatalf("%+v", cfg)
	}
}

func TestNodesAloneMeanRedlock(t *testing.T) {
	cfg, err := configure([]string{"--nodes", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}, noEnv)
	if err != nil || cfg.BackendName() != "redlock" {
		t.Fatalf("%v %v", cfg.BackendName(), err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", writeConfig(t, "lisen = \"x\"\n")}, "unknown keys [lisen]"},
		{[]string{"--backend", "etcd"}, `backend "etcd"`},
		{[]string{"--backend", "redlock"}, "needs redlock.nodes"},
		{[]string{"--nodes", "127.0.0.1:1", "--config", writeConfig(t, "[redlock]\nkey_prefix = \"lockproxy:db1:\"\n")}, "lies among the keys of a SELECTed database"},
		{[]string{"--config", "/nonexistent.toml"}, "no such file"},
		{[]string{"--bogus"}, "unknown flag"},
	} {
		if _, err := configure(tc.args, noEnv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

func noEnv(string) (string, bool) { return "", false }

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lockproxy.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
