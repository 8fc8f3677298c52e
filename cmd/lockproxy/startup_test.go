package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/lockproxy/lockproxy/instance"
)

// three is a valid node list; nothing listens there, and nothing dials it:
// these tests stop at the configuration.
const three = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"

// TestStartupMistakes: each mistake an operator can make is refused with
// exit status 2 and one line that names it, before anything starts.
func TestStartupMistakes(t *testing.T) {
	for _, tc := range []struct {
		args string
		want string
	}{
		{"--nodes=", "--nodes is empty"},
		{"--zk=", "--zk is empty"},
		{"--nodes a:1,a:1,b:1", `lists "a:1" twice`},
		{"--nodes A:1,a:01,b:1", `lists "a:01" twice`},
		{"--nodes 127.0.0.1", `"127.0.0.1": want host:port`},
		{"--nodes 127.0.0.1:99999", `port "99999" must be a number in 1..65535`},
		{"--nodes 127.0.0.1:0", `port "0" must be a number in 1..65535`},
		{"--nodes foo:bar", `port "bar" must be a number`},
		{"--nodes a:1,,b:1", "entry 2 \"\": empty entry"},
		{"--nodes :6379", "with a host name"},
		{"--zk 127.0.0.1", `zookeeper.servers entry 1 "127.0.0.1": want host:port`},
		{"--backend redlock --zk 127.0.0.1:2181", "backend redlock but zookeeper.servers"},
		{"--backend zookeeper --nodes " + three, "backend zookeeper but redlock.nodes"},
		{"--backend embedded --nodes " + three, "backend embedded but"},
		{"--nodes " + three + " --zk 127.0.0.1:2181", "both redlock.nodes"},
		{"--listen 127.0.0.1", `listen "127.0.0.1": want host:port`},
		{"--listen 127.0.0.1:70000", "port must be a number in 0..65535"},
		{"--metrics-listen nope", "metrics_listen"},
		{"--log-level loud", `log_level "loud"`},
		{"--password a --password-file /x", "both given"},
		{"version", `unexpected argument "version"`},
		{"--nodes " + three + " extra", `unexpected argument "extra"`},
		{"--bogus", "unknown flag"},
		{"--config " + conf(t, "drift_factor = 5", "redlock"), "redlock.drift_factor = 5: must be at least 0 and below 0.5"},
		{"--config " + conf(t, "drift_factor = -0.1", "redlock"), "redlock.drift_factor"},
		{"--config " + conf(t, "max_clients = -5", "limits"), "limits.max_clients = -5: must be in 1.."},
		{"--config " + conf(t, "max_clients = 0", "limits"), "limits.max_clients = 0"},
		{"--config " + conf(t, "node_timeout_ms = -1", "redlock"), "redlock.node_timeout_ms = -1"},
		{"--config " + conf(t, "pipelines = 0", "redlock"), "redlock.pipelines = 0"},
		{"--config " + conf(t, "pool_size = -1", "redlock"), "redlock.pool_size = -1"},
		{"--config " + conf(t, "session_timeout_ms = -1", "zookeeper"), "zookeeper.session_timeout_ms = -1"},
		{"--config " + conf(t, `root = "lockproxy"`, "zookeeper"), "zookeeper.root"},
		{"--config " + conf(t, "op_timeout_ms = 0", "locks"), "locks.op_timeout_ms = 0"},
		{"--config " + conf(t, "waiter_keep_ms = -1", "locks"), "locks.waiter_keep_ms = -1"},
		{"--config " + conf(t, "renew_every_ms = -1", "locks"), "locks.renew_every_ms = -1"},
		{"--config " + conf(t, "max_scripts = 0", "legacy"), "legacy.max_scripts = 0"},
		{"--config " + conf(t, "max_key_bytes = 0", "limits"), "limits.max_key_bytes = 0"},
		{"--config " + conf(t, "max_waiters = -1", "limits"), "limits.max_waiters = -1"},
		{"--config " + conf(t, "nodes = 0", "embedded"), "embedded.nodes = 0"},
		{"--config " + conf(t, `password = "a"`+"\n"+`password_file = "/x"`, ""), "password and password_file are both set"},
		{"--config " + conf(t, `cert_file = "/x"`, "tls"), "tls.cert_file and tls.key_file go together"},
		{"--config " + conf(t, `ca_file = "/x"`, "redlock.tls"), "enabled = false"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(strings.Fields(tc.args), noEnv, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("lockproxy %s: exit %d, stderr %q, stdout %q; want exit 2 and %q", tc.args, code, stderr.String(), stdout.String(), tc.want)
		}
	}
}

// conf writes a config file with one line under section.
func conf(t *testing.T, line, section string) string {
	if section != "" {
		line = "[" + section + "]\n" + line
	}
	return writeConfig(t, line+"\n")
}

func TestNodeListsImplyTheirBackend(t *testing.T) {
	for args, want := range map[string]string{
		"--nodes " + three:                              "redlock",
		"--zk 127.0.0.1:2181":                           "zookeeper",
		"--zk 127.0.0.1:2181,[::1]:2181,localhost:2181": "zookeeper",
		"": "embedded",
	} {
		cfg, err := configure(strings.Fields(args), noEnv)
		if err != nil || cfg.BackendName() != want {
			t.Errorf("%q: backend %s, err %v; want %s", args, cfg.BackendName(), err, want)
		}
	}
}

func TestVersionAndHelpGoToStdout(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--version"}, noEnv, &stdout, &stderr); code != 0 || stdout.String() != "lockproxy "+instance.Version+"\n" || stderr.Len() != 0 {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"--help"}, noEnv, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("--help: exit %d, stderr %q", code, stderr.String())
	}
	for _, flag := range []string{"--config", "--listen", "--backend", "--nodes", "--zk", "--metrics-listen",
		"--password-file", "--protected-mode", "--log-level", "--version", "--new-nodes", "LOCKPROXY_PASSWORD"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("--help does not mention %s:\n%s", flag, stdout.String())
		}
	}
}

// TestPasswordSources: the password comes from the config file, then the
// environment, then the flags, each overriding the one before.
func TestPasswordSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		v, ok := map[string]string{envPassword: "from-env", envNodePassword: "nodes-env"}[k]
		return v, ok
	}
	withFile := writeConfig(t, `password_file = "`+file+`"`+"\n")
	for _, tc := range []struct {
		args           []string
		env            lookupEnv
		pass, passFile string
	}{
		{[]string{"--config", withFile}, noEnv, "", file},
		{[]string{"--config", withFile}, env, "from-env", ""},
		{[]string{"--config", withFile, "--password", "flag"}, env, "flag", ""},
		{[]string{"--password-file", file}, env, "", file},
	} {
		cfg, err := configure(tc.args, tc.env)
		if err != nil || cfg.Password != tc.pass || cfg.PasswordFile != tc.passFile {
			t.Errorf("%v: password %q file %q err %v; want %q %q", tc.args, cfg.Password, cfg.PasswordFile, err, tc.pass, tc.passFile)
		}
	}
	cfg, _ := configure(nil, env)
	if cfg.Redlock.Password != "nodes-env" {
		t.Errorf("%s not used: %q", envNodePassword, cfg.Redlock.Password)
	}
}

// TestExampleConfigListsEveryKey: every key of instance.Config appears in
// config.example.toml, so that the file documents them all.
func TestExampleConfigListsEveryKey(t *testing.T) {
	var cfg instance.Config
	md, err := toml.DecodeFile("../../config.example.toml", &cfg)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(typ reflect.Type, path []string)
	walk = func(typ reflect.Type, path []string) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			key := append(slices.Clone(path), f.Tag.Get("toml"))
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, key)
			} else if !md.IsDefined(key...) {
				t.Errorf("config.example.toml lacks %s", strings.Join(key, "."))
			}
		}
	}
	walk(reflect.TypeOf(cfg), nil)
}

// TestStartupFailuresNameTheKey: what only shows when lockproxy starts — a
// file that cannot be read, an address that cannot be bound — exits 2 with
// one line naming the key, and no stack trace (issue 28 §4; these exited 1
// with a Go stack trace and no key).
func TestStartupFailuresNameTheKey(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		args string
		want string
	}{
		{"--listen 127.0.0.1:0 --config " + conf(t, `cert_file = "`+missing+`"`+"\n"+`key_file = "`+missing+`"`, "tls"), "tls.cert_file: open " + missing},
		{"--listen 127.0.0.1:0 --password-file " + missing, "password_file: open " + missing},
		{"--listen 127.0.0.1:0 --password-file " + empty, "password_file: " + empty + " is empty"},
		{"--listen " + busy.Addr().String(), "listen " + busy.Addr().String() + ": bind: address already in use"},
		{"--listen 127.0.0.1:0 --metrics-listen " + busy.Addr().String(), "metrics_listen " + busy.Addr().String() + ": bind: address already in use"},
		// TEST-NET-1 (RFC 5737): no host has it, so it cannot be bound.
		{"--listen 192.0.2.1:6380", "listen 192.0.2.1:6380: bind: cannot assign requested address"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(strings.Fields(tc.args), noEnv, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || strings.Contains(stderr.String(), "goroutine") {
			t.Errorf("lockproxy %s: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestEmptyValuesRefused: a flag or variable given explicitly but empty (an
// unset shell variable) is refused like --nodes ”, not taken for "none"
// (issue 28 §4: --password ” silently meant no password).
func TestEmptyValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  lookupEnv
		want string
	}{
		{[]string{"--config", ""}, noEnv, "--config is empty"},
		{[]string{"--password", ""}, noEnv, "--password is empty"},
		{[]string{"--password-file", ""}, noEnv, "--password-file is empty"},
		{[]string{"--password="}, noEnv, "--password is empty"},
		{nil, func(k string) (string, bool) { return "", k == envPassword }, envPassword + " is set but empty"},
		{nil, func(k string) (string, bool) { return "", k == envNodePassword }, envNodePassword + " is set but empty"},
	} {
		// configure, not run: accepted, run would serve until killed.
		// run turns every configure error into exit 2 (TestStartupMistakes).
		if _, err := configure(tc.args, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lockproxy %q: %v; want %q", tc.args, err, tc.want)
		}
	}
}
