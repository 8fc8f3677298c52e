// Command lockproxy serves distributed locks over the Redis protocol.
//
//	lockproxy [--config FILE] [--listen ADDR] [--backend redlock|zookeeper|embedded]
//	          [--nodes HOST:PORT,...] [--zk HOST:PORT,...] [--metrics-listen ADDR]
//
// Every flag overrides the config file's key of the same meaning. It takes
// no positional arguments. SIGHUP re-reads the configuration and applies
// what can change while serving (password, log level); certificates are
// re-read whenever their files change. Exit status: 0 after a drain (SIGINT, SIGTERM),
// --help or --version; 2 for a configuration that cannot work; 1 when
// serving failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/upstream"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// drainTimeout bounds the release of connection-bound locks at shutdown.
const drainTimeout = 10 * time.Second

// The environment variables that hold passwords, so that they need not be
// on the command line, where ps shows them.
const (
	envPassword     = "LOCKPROXY_PASSWORD"
	envNodePassword = "LOCKPROXY_REDLOCK_PASSWORD"
)

// errVersion asks for the version instead of a server.
var errVersion = errors.New("version requested")

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// lookupEnv is os.LookupEnv: a variable set but empty is told from one
// not set.
type lookupEnv func(string) (string, bool)

// run is main with its inputs and outputs passed in; it returns the exit
// status.
func run(args []string, getenv lookupEnv, stdout, stderr io.Writer) int {
	cfg, err := configure(args, getenv)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(stdout, usage())
		return 0
	case errors.Is(err, errVersion):
		fmt.Fprintln(stdout, "lockproxy", instance.Version)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "lockproxy: %v\n(lockproxy --help lists the flags; config.example.toml the keys)\n", err)
		return 2
	}
	level := zap.NewAtomicLevel()
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		fmt.Fprintln(stderr, "lockproxy:", err)
		return 2
	}
	log := newLogger(level, stderr)
	defer log.Sync()
	upstream.RouteLogs(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := func(in *instance.Instance) {
		next, err := configure(args, getenv)
		if err == nil {
			_, _, err = in.Reload(next)
		}
		if err != nil {
			log.Error("SIGHUP: configuration not reloaded; the running one stays", zap.Error(err))
			return
		}
		if next.LogLevel != level.Level().String() {
			_ = level.UnmarshalText([]byte(next.LogLevel))
			log.Info("log level changed", zap.String("log_level", next.LogLevel))
		}
	}
	err = serve(ctx, cfg, log, hup, reload)
	switch {
	case errors.Is(err, instance.ErrStartup):
		// One line naming the key, as for a mistake in the flags: the
		// operator fixes the configuration or the host, not the code.
		fmt.Fprintf(stderr, "lockproxy: %v\n", err)
		return 2
	case err != nil:
		log.Error("lockproxy stopped", zap.Error(err))
		return 1
	}
	return 0
}

// serve runs an instance of cfg until ctx is done, reloading it on each
// value from hup, then drains it.
func serve(ctx context.Context, cfg instance.Config, log *zap.Logger, hup <-chan os.Signal, reload func(*instance.Instance)) error {
	in, err := instance.Start(cfg, log)
	if err != nil {
		return err
	}
	var served error
	for loop := true; loop; {
		select {
		case <-ctx.Done():
			loop = false
		case served = <-in.Served():
			loop = false
		case <-hup:
			log.Info("SIGHUP: reloading the configuration")
			reload(in)
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	return errors.Join(served, in.Shutdown(dctx))
}

// flags are lockproxy's command-line flags.
type flags struct {
	fs                            *pflag.FlagSet
	file, listen, backend         *string
	nodes, zk, metrics            *string
	password, passwordFile, level *string
	protected, version, newNodes  *bool
}

func newFlags() flags {
	def := instance.Default()
	fs := pflag.NewFlagSet("lockproxy", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors and --help itself
	fs.SortFlags = false
	return flags{
		fs:      fs,
		file:    fs.String("config", "", "TOML config file (see config.example.toml)"),
		listen:  fs.String("listen", def.Listen, "RESP listen address, HOST:PORT"),
		backend: fs.String("backend", "", "lock backend: redlock, zookeeper or embedded (default: the one --nodes or --zk implies, else embedded)"),
		nodes:   fs.String("nodes", "", "redlock: Redis nodes, HOST:PORT,... (implies --backend redlock)"),
		newNodes: fs.Bool("new-nodes", false, "redlock: the nodes are new, so count them at once instead of holding them out for "+
			"redlock.max_lease_ms; checked (reachable, distinct, none holds lockproxy's keys) and refused otherwise. For the first start only"),
		zk:           fs.String("zk", "", "zookeeper: ensemble servers, HOST:PORT,... (implies --backend zookeeper)"),
		metrics:      fs.String("metrics-listen", "", "HTTP address for /metrics, /healthz and /readyz (empty: off)"),
		password:     fs.String("password", "", "password clients must give with AUTH or HELLO; visible in ps: prefer --password-file or "+envPassword),
		passwordFile: fs.String("password-file", "", "file holding the password clients must give"),
		protected:    fs.Bool("protected-mode", def.ProtectedMode, "without a password, refuse clients that are not on the loopback interface"),
		level:        fs.String("log-level", def.LogLevel, "log level: debug, info, warn, error"),
		version:      fs.Bool("version", false, "print the version and exit"),
	}
}

func usage() string {
	return "Usage: lockproxy [flags]\n\nServes distributed locks over the Redis protocol. Flags override the config file's keys.\n" +
		"Environment: " + envPassword + " (clients' password), " + envNodePassword + " (the Redis nodes' password).\n\n" +
		newFlags().fs.FlagUsages()
}

// configure reads the config file named by --config, if any, over the
// defaults, then the environment's passwords, then applies the flags the
// user set, and validates the result.
func configure(args []string, getenv lookupEnv) (instance.Config, error) {
	cfg := instance.Default()
	f := newFlags()
	if err := f.fs.Parse(args); err != nil {
		return cfg, err
	}
	if *f.version {
		return cfg, errVersion
	}
	if f.fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: lockproxy takes flags only", f.fs.Arg(0))
	}
	if err := f.refuseEmpty(); err != nil {
		return cfg, err
	}
	if *f.file != "" {
		md, err := toml.DecodeFile(*f.file, &cfg)
		if err != nil {
			return cfg, fmt.Errorf("config %s: %w", *f.file, err)
		}
		if unknown := md.Undecoded(); len(unknown) > 0 {
			return cfg, fmt.Errorf("config %s: unknown keys %v (config.example.toml lists them all)", *f.file, unknown)
		}
	}
	if p, ok := getenv(envPassword); ok {
		if p == "" {
			return cfg, errors.New(envPassword + " is set but empty: give the password, or unset it (an unset variable?)")
		}
		cfg.Password, cfg.PasswordFile = p, ""
	}
	if p, ok := getenv(envNodePassword); ok {
		if p == "" {
			return cfg, errors.New(envNodePassword + " is set but empty: give the password, or unset it (an unset variable?)")
		}
		cfg.Redlock.Password, cfg.Redlock.PasswordFile = p, ""
	}
	if err := f.apply(&cfg); err != nil {
		return cfg, err
	}
	impliedBackend(&cfg)
	return cfg, cfg.Validate()
}

// apply sets the keys whose flags were given.
func (f flags) apply(cfg *instance.Config) error {
	set := func(name string, apply func()) {
		if f.fs.Changed(name) {
			apply()
		}
	}
	if f.fs.Changed("password") && f.fs.Changed("password-file") {
		return errors.New("--password and --password-file are both given: give the password one way")
	}
	var err error
	set("listen", func() { cfg.Listen = *f.listen })
	set("backend", func() { cfg.Backend = *f.backend })
	set("nodes", func() { cfg.Redlock.Nodes, err = nodeList("--nodes", *f.nodes) })
	if err != nil {
		return err
	}
	set("new-nodes", func() { cfg.Redlock.NewNodes = *f.newNodes })
	set("zk", func() { cfg.ZooKeeper.Servers, err = nodeList("--zk", *f.zk) })
	if err != nil {
		return err
	}
	set("metrics-listen", func() { cfg.MetricsListen = *f.metrics })
	set("password", func() { cfg.Password, cfg.PasswordFile = *f.password, "" })
	set("password-file", func() { cfg.Password, cfg.PasswordFile = "", *f.passwordFile })
	set("protected-mode", func() { cfg.ProtectedMode = *f.protected })
	set("log-level", func() { cfg.LogLevel = *f.level })
	return nil
}

// refuseEmpty refuses a flag given explicitly with an empty value (an
// unset shell variable, say): "--password ”" must not mean "no password".
func (f flags) refuseEmpty() error {
	for _, name := range []string{"config", "password", "password-file"} {
		if f.fs.Changed(name) && strings.TrimSpace(f.fs.Lookup(name).Value.String()) == "" {
			return fmt.Errorf("--%s is empty: give a value, or leave the flag out (an unset variable?)", name)
		}
	}
	return nil
}

// nodeList splits a flag's HOST:PORT,... list. An empty list given
// explicitly (an unset shell variable, say) is an error, not "no nodes".
func nodeList(flag, v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("%s is empty: give HOST:PORT,... (an unset variable?)", flag)
	}
	return strings.Split(v, ","), nil
}

// impliedBackend chooses the backend that the one node list given implies,
// when none is named.
func impliedBackend(cfg *instance.Config) {
	redlock, zk := len(cfg.Redlock.Nodes) > 0, len(cfg.ZooKeeper.Servers) > 0
	switch {
	case cfg.Backend != "" || redlock == zk:
	case redlock:
		cfg.Backend = "redlock"
	case zk:
		cfg.Backend = "zookeeper"
	}
}

// newLogger writes JSON lines with ISO-8601 timestamps to w at level,
// which SIGHUP may change.
func newLogger(level zap.AtomicLevel, w io.Writer) *zap.Logger {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(ec), zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel))
}
