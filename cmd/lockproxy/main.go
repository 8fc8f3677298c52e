// Command lockproxy serves distributed locks over the Redis protocol.
//
//	lockproxy [--config FILE] [--listen ADDR] [--backend redlock|zookeeper|embedded]
//	          [--nodes HOST:PORT,...] [--zk HOST:PORT,...] [--metrics-listen ADDR]
//	          [--threads N]
//
// Every flag overrides the config file's key of the same meaning.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/lockproxy/lockproxy/server"
	"github.com/lockproxy/lockproxy/upstream"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// drainTimeout bounds the release of connection-bound locks at shutdown.
const drainTimeout = 10 * time.Second

func main() {
	cfg, err := configure(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockproxy:", err)
		os.Exit(2)
	}
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockproxy:", err)
		os.Exit(2)
	}
	defer log.Sync()
	setThreads(cfg, log)
	upstream.RouteLogs(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, cfg, log, drainTimeout); err != nil {
		log.Error("lockproxy stopped", zap.Error(err))
		os.Exit(1)
	}
}

// configure reads the config file named by --config, if any, over the
// defaults, then applies the flags the user set.
func configure(args []string) (server.Config, error) {
	cfg := server.Default()
	fs := pflag.NewFlagSet("lockproxy", pflag.ContinueOnError)
	file := fs.String("config", "", "TOML config file (see config.example.toml)")
	listen := fs.String("listen", cfg.Listen, "RESP listen address")
	backend := fs.String("backend", "embedded", "lock backend: redlock, zookeeper or embedded")
	nodes := fs.StringSlice("nodes", nil, "redlock: Redis nodes, HOST:PORT,...")
	zk := fs.StringSlice("zk", nil, "zookeeper: ensemble servers, HOST:PORT,...")
	metrics := fs.String("metrics-listen", "", "HTTP address for /metrics, /healthz and /readyz (empty: off)")
	password := fs.String("password", "", "password clients must give with AUTH or HELLO")
	level := fs.String("log-level", cfg.LogLevel, "log level: debug, info, warn, error")
	threads := fs.Int("threads", cfg.Threads, "threads running Go code, GOMAXPROCS (0: one for zookeeper, one per CPU otherwise)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if *file != "" {
		md, err := toml.DecodeFile(*file, &cfg)
		if err != nil {
			return cfg, fmt.Errorf("config %s: %w", *file, err)
		}
		if unknown := md.Undecoded(); len(unknown) > 0 {
			return cfg, fmt.Errorf("config %s: unknown keys %v (config.example.toml lists them all)", *file, unknown)
		}
	}
	set := func(name string, apply func()) {
		if fs.Changed(name) {
			apply()
		}
	}
	set("listen", func() { cfg.Listen = *listen })
	set("backend", func() { cfg.Backend = *backend })
	set("nodes", func() { cfg.Redlock.Nodes = *nodes })
	set("zk", func() { cfg.ZooKeeper.Servers = *zk })
	set("metrics-listen", func() { cfg.MetricsListen = *metrics })
	set("password", func() { cfg.Password = *password })
	set("log-level", func() { cfg.LogLevel = *level })
	set("threads", func() { cfg.Threads = *threads })
	if len(cfg.Redlock.Nodes) > 0 && cfg.Backend == "" {
		cfg.Backend = "redlock" // nodes given without a backend mean redlock
	}
	return cfg, cfg.Validate()
}

// setThreads sets GOMAXPROCS as cfg asks and logs the threads and why.
func setThreads(cfg server.Config, log *zap.Logger) {
	n, why := threads(cfg, os.Getenv("GOMAXPROCS"))
	if n > 0 {
		runtime.GOMAXPROCS(n)
	}
	log.Info("threads", zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)), zap.String("set_by", why))
}

// threads is the GOMAXPROCS cfg asks for, or 0 to keep Go's, and what
// decided it. env is the GOMAXPROCS environment variable, which Go applies
// itself. The zookeeper backend gets one thread: its requests all go
// through one session, go-zookeeper's send and receive goroutines, so a
// second thread is mostly woken to find nothing to do. On the benchmark's
// two CPUs one thread cut lockproxy's CPU per cycle by about half and was
// not slower at any concurrency measured (README, Operations, Threads).
func threads(cfg server.Config, env string) (int, string) {
	switch {
	case cfg.Threads > 0:
		return cfg.Threads, "threads"
	case env != "":
		return 0, "GOMAXPROCS"
	case cfg.BackendName() == "zookeeper":
		return 1, "zookeeper backend"
	}
	return 0, "one per CPU"
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	return zc.Build()
}
