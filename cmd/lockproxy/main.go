// Command lockproxy serves distributed locks over the Redis protocol.
//
//	lockproxy [--config FILE] [--listen ADDR] [--backend redlock|zookeeper|embedded]
//	          [--nodes HOST:PORT,...] [--zk HOST:PORT,...] [--metrics-listen ADDR]
//
// Every flag overrides the config file's key of the same meaning.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
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
	upstream.RouteLogs(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := instance.Run(ctx, cfg, log, drainTimeout); err != nil {
		log.Error("lockproxy stopped", zap.Error(err))
		os.Exit(1)
	}
}

// configure reads the config file named by --config, if any, over the
// defaults, then applies the flags the user set.
func configure(args []string) (instance.Config, error) {
	cfg := instance.Default()
	fs := pflag.NewFlagSet("lockproxy", pflag.ContinueOnError)
	file := fs.String("config", "", "TOML config file (see config.example.toml)")
	listen := fs.String("listen", cfg.Listen, "RESP listen address")
	backend := fs.String("backend", "embedded", "lock backend: redlock, zookeeper or embedded")
	nodes := fs.StringSlice("nodes", nil, "redlock: Redis nodes, HOST:PORT,...")
	zk := fs.StringSlice("zk", nil, "zookeeper: ensemble servers, HOST:PORT,...")
	metrics := fs.String("metrics-listen", "", "HTTP address for /metrics, /healthz and /readyz (empty: off)")
	password := fs.String("password", "", "password clients must give with AUTH or HELLO")
	level := fs.String("log-level", cfg.LogLevel, "log level: debug, info, warn, error")
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
	if len(cfg.Redlock.Nodes) > 0 && cfg.Backend == "" {
		cfg.Backend = "redlock" // nodes given without a backend mean redlock
	}
	return cfg, cfg.Validate()
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
