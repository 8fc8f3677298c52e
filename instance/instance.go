package instance

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/commands"
	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/tlsfiles"
	"github.com/lockproxy/lockproxy/lists"
	"github.com/lockproxy/lockproxy/passthrough"
	"github.com/lockproxy/lockproxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/resp"
	"github.com/lockproxy/lockproxy/upstream"
	"github.com/lockproxy/lockproxy/upstream/zookeeper"
	"go.uber.org/zap"
)

// Version is lockproxy's version, reported by INFO.
var Version = "0.1.0-dev"

// Instance is one running lockproxy.
type Instance struct {
	cfg         Config
	log         *zap.Logger
	engine      *engine.Engine
	resp        *resp.Server
	ln          net.Listener
	metrics     *http.Server
	metricsAddr string
	metricsLn   net.Listener // nil: no metrics listener
	closers     []func()     // backend resources, closed last, in reverse order
	nodes       []upstream.RedisOptions
	secrets     secrets          // passwords, read from their files
	tlsFiles    tlsfiles.Group   // every TLS file, re-read on Reload
	listenTLS   *tls.Config      // nil: plain TCP
	nodesTLS    *tlsfiles.Dialer // nil: plain TCP to the Redis nodes
	zkTLS       *tlsfiles.Dialer // nil: plain TCP to ZooKeeper
	backendAddr []string         // the backend's nodes, for the start-up log
	nodeSet     *nodeSet         // the redlock nodes' health; nil for zookeeper
	lockMetrics *lockMetrics
	served      chan error
	shutdown    chan struct{}

	redlock *quorum.Redlock // the redlock or embedded backend; nil for zookeeper

	router *passthrough.Router      // nil: no data Redis
	subs   []*upstream.Subscription // each redlock node's release notifications and clients' pub/sub
	hub    *pubsub.Hub              // clients' pub/sub through subs; nil: this process only (zookeeper)
	lists  []lists.Node             // each node's signal lists; none on zookeeper
}

// announceTaken tells the other instances, through every node it can
// reach, that key held by token was taken from its holder through this
// one (engine.Config.AnnounceTaken). Best effort, bounded by op_timeout_ms.
func (in *Instance) announceTaken(key, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), ms(in.cfg.Locks.OpTimeoutMS))
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range in.subs {
		wg.Go(func() {
			if err := s.PublishTaken(ctx, key, token); err != nil {
				in.log.Debug("announcing a lock taken by DEL", zap.String("key", key), zap.Error(err))
			}
		})
	}
	wg.Wait()
}

// Start builds an instance from cfg and starts serving in the background.
func Start(cfg Config, log *zap.Logger) (_ *Instance, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	in := &Instance{cfg: cfg, log: log, served: make(chan error, 1), shutdown: make(chan struct{})}
	defer func() {
		if err != nil {
			in.closeBackend()
		}
	}()
	if err := in.prepare(); err != nil {
		return nil, err
	}
	if err := in.listen(); err != nil {
		return nil, err
	}
	in.lockMetrics = newLockMetrics()
	build := func(ev engine.Events) (engine.Backend, error) {
		b, err := in.backend(ev)
		if err != nil {
			return nil, err
		}
		if in.nodeSet != nil {
			b = explained{b, in.nodeSet}
		}
		return countBackend(b, in.lockMetrics), nil
	}
	if in.engine, err = engine.New(build, engine.Config{
		BoundLease:    ms(cfg.Locks.BoundLeaseMS),
		RenewEvery:    ms(cfg.Locks.RenewEveryMS),
		OpTimeout:     ms(cfg.Locks.OpTimeoutMS),
		MaxWaiters:    cfg.Limits.MaxWaiters,
		WaiterKeep:    ms(cfg.Locks.WaiterKeepMS),
		LockDelay:     cfg.lockDelay(),
		AnnounceTaken: in.announceTaken,
	}, log); err != nil {
		return nil, err
	}
	if in.resp, err = in.respServer(); err != nil {
		return nil, err
	}
	in.serveMetrics()
	go func() { in.served <- in.resp.Serve(in.ln) }()
	in.logServing()
	in.warnUsersOpen()
	return in, nil
}

// listen binds the RESP and metrics listeners, before anything connects
// to the backend: an address that cannot be bound is a StartError.
func (in *Instance) listen() (err error) {
	if in.ln, err = net.Listen("tcp", in.cfg.Listen); err != nil {
		return startError("listen "+in.cfg.Listen, err)
	}
	in.closers = append(in.closers, func() { in.ln.Close() })
	if in.cfg.MetricsListen == "" {
		return nil
	}
	if in.metricsLn, err = net.Listen("tcp", in.cfg.MetricsListen); err != nil {
		return startError("metrics_listen "+in.cfg.MetricsListen, err)
	}
	in.closers = append(in.closers, func() { in.metricsLn.Close() })
	return nil
}

// backend builds the lock backend, which reports to ev, and registers what
// must be closed.
func (in *Instance) backend(ev engine.Events) (engine.Backend, error) {
	if in.cfg.BackendName() == "zookeeper" {
		return in.zookeeper(ev)
	}
	addrs, tlsc := in.cfg.Redlock.Nodes, in.nodesTLS
	if in.cfg.BackendName() == "embedded" {
		tlsc = nil
		emb, err := upstream.StartEmbedded(in.cfg.Embedded.Nodes)
		if err != nil {
			return nil, fmt.Errorf("embedded backend: %w", err)
		}
		in.closers = append(in.closers, emb.Close)
		addrs = emb.Addrs()
		in.log.Warn("EMBEDDED BACKEND: locks live in this process's memory only and are NOT DURABLE; " +
			"they vanish when lockproxy stops. For development only: configure backend = \"redlock\" for real use.")
	}
	rc := in.cfg.Redlock
	// Embedded nodes live and die with this process: none restarts alone.
	maxLease := ms(rc.MaxLeaseMS)
	if in.cfg.BackendName() == "embedded" {
		maxLease = 0
	}
	in.nodeSet = newNodeSet(in.log)
	nodes := make([]quorum.Node, len(addrs))
	redisNodes := make([]*upstream.RedisNode, len(addrs))
	for i, a := range addrs {
		w := in.nodeSet.add(a, maxLease == 0)
		opts := upstream.RedisOptions{
			Addr: a, Password: in.secrets.nodes, Prefix: rc.KeyPrefix, TLSConfig: hostTLS(tlsc, a),
			PoolSize: rc.PoolSize, Pipelines: rc.Pipelines, MaxBatch: rc.MaxBatch,
			DriftFactor: rc.DriftFactor, DriftFixed: ms(rc.DriftFixedMS), ClockSkew: ms(rc.ClockSkewMS),
			Observe: w.record,
		}
		in.nodes = append(in.nodes, opts)
		n := upstream.NewRedisNode(opts)
		in.closers = append(in.closers, func() { _ = n.Close() })
		w.Node, nodes[i], redisNodes[i] = n, n, n
		ln := upstream.NewListNode(opts, in.cfg.Limits.MaxBlockedClients)
		in.closers = append(in.closers, func() { _ = ln.Close() })
		in.lists = append(in.lists, ln)
	}
	in.backendAddr = addrs
	if in.cfg.BackendName() == "redlock" {
		if err := in.checkNodes(redisNodes); err != nil {
			return nil, err
		}
	}
	r := quorum.New(nodes, quorum.Config{
		NodeTimeout: ms(rc.NodeTimeoutMS),
		DriftFactor: rc.DriftFactor,
		DriftFixed:  ms(rc.DriftFixedMS),
		MaxLease:    maxLease,
		OnTrust:     in.nodeSet.trust,
		OnRepair:    in.nodeSet.repair,
		OnClockJump: in.nodeSet.clockJumped,
		OnLost:      lostFor(ev),
	})
	in.nodeSet.redlock = r
	in.nodeSet.clock.Store(r)
	in.nodeSet.start()
	in.closers = append(in.closers, in.nodeSet.close)
	in.closers = append(in.closers, func() { _ = r.Close() }) // closed first: stops rollbacks still retried
	in.redlock = r
	in.subscribe(ev)
	return r, nil
}

// zookeeper builds the zookeeper backend. A watched predecessor's release
// wakes this instance's waiter for the key (ev.Released).
func (in *Instance) zookeeper(ev engine.Events) (engine.Backend, error) {
	zc := in.cfg.ZooKeeper
	opts := zookeeper.Options{
		Servers:        zc.Servers,
		Root:           zc.Root,
		SessionTimeout: ms(zc.SessionTimeoutMS),
		Digest:         zc.ACLDigest,
		Events:         ev,
	}
	if in.zkTLS != nil {
		opts.TLS = in.zkTLS.Config
	}
	z, err := zookeeper.New(opts, in.log)
	if err != nil {
		return nil, fmt.Errorf("zookeeper backend: %w", err)
	}
	in.closers = append(in.closers, func() { _ = z.Close() })
	in.backendAddr = zc.Servers
	// Serve once the session is up, so that the first clients are not
	// refused; an ensemble that is down is waited for in the background.
	deadline := time.Now().Add(5 * time.Second)
	for !z.Connected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !z.Connected() {
		in.log.Warn("no ZooKeeper session yet; locks are refused until there is one", zap.Strings("servers", zc.Servers))
	}
	return z, nil
}

// subscribe listens on every node for releases, through any instance, and
// tells ev, which wakes this instance's waiters for the key; the same
// connections carry the clients' pub/sub (in.hub, nodePubSub). It waits
// briefly for the subscriptions so that waiters are woken from the start;
// a node that is down is subscribed to when it comes back.
func (in *Instance) subscribe(ev engine.Events) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	taken := func(string, string) {}
	if t, ok := ev.(interface{ Taken(key, token string) }); ok {
		taken = t.Taken // the engine: a DEL through another instance
	}
	dedup := pubsub.NewDedup(len(in.nodes), 0, 0)
	var shards *pubsub.Dedup // nil: shard channels stay in this process (miniredis has none)
	if in.cfg.BackendName() != "embedded" {
		shards = pubsub.NewDedup(len(in.nodes), 0, 0)
	}
	remote := &nodePubSub{timeout: in.nodeCallTimeout(), reserved: upstream.ReleasedChannel(in.cfg.Redlock.KeyPrefix)}
	in.hub = pubsub.NewRemote(remote, dedup, shards)
	for i, opts := range in.nodes {
		s := upstream.SubscribeHandlers(opts, upstream.Handlers{
			Released: ev.Released, Taken: taken,
			Message: func(pattern, channel string, payload []byte) { in.hub.FromNode(i, pattern, channel, payload) },
			Up: func(up bool) {
				if up {
					dedup.Up(i)
				} else {
					dedup.Down(i)
				}
			},
			ShardMessage: func(channel string, payload []byte) { in.hub.FromNodeShard(i, channel, payload) },
			ShardUp: func(up bool) {
				if shards == nil { // embedded: the hub never joins shard channels on the nodes
					return
				}
				if up {
					shards.Up(i)
				} else {
					shards.Down(i)
				}
			},
		}, in.log)
		remote.subs = append(remote.subs, s)
		in.closers = append(in.closers, func() { _ = s.Close() })
		in.subs = append(in.subs, s)
		if err := s.Ready(ctx); err != nil {
			in.log.Warn("release notifications not yet subscribed; waiters fall back to lease expiry meanwhile",
				zap.String("node", opts.Addr), zap.Error(err))
		}
	}
}

func (in *Instance) respServer() (*resp.Server, error) {
	l := in.cfg.Limits
	scripts := commands.Scripts{Backend: in.cfg.BackendName(), TimeLimit: ms(in.cfg.Legacy.ScriptTimeLimitMS),
		Reserved: cmp.Or(in.cfg.Redlock.KeyPrefix, upstream.DefaultPrefix)}
	if in.redlock != nil {
		scripts.Runner = in.redlock // scripts outside the catalog run on the nodes
	}
	if in.hub != nil {
		scripts.Publish = in.hub.Publish // Spring's PUB_SUB_LOCK unlock wakes its waiters
	}
	h := commands.New(in.engine, commands.Config{
		Limits:  commands.Limits{MaxKeyBytes: l.MaxKeyBytes, MaxTokenBytes: l.MaxTokenBytes},
		Legacy:  commands.Legacy{DelFromAnyConnection: in.cfg.Legacy.DelFromAnyConnection, MaxScripts: in.cfg.Legacy.MaxScripts},
		Scripts: scripts,
	}, in.log)
	table := resp.NewTable()
	if err := h.Register(table); err != nil {
		return nil, err
	}
	lc := lists.Config{MaxBlocked: l.MaxBlockedClients, NodeTimeout: in.nodeCallTimeout()}
	if err := table.Add(lists.New(in.lists, lc, in.log).Commands()...); err != nil {
		return nil, err
	}
	var session resp.Session = h
	if in.nodeSet != nil {
		session = nodesInfo{session, in.nodeSet}
	}
	var route func(*resp.Conn, [][]byte) bool
	var err error
	if in.router, err = in.newRouter(); err != nil {
		return nil, err
	} else if in.router != nil {
		session, route = withInfo{session, in.router}, in.router.Route
		in.closers = append(in.closers, in.router.Close)
	}
	srv, err := resp.NewServer(resp.Config{
		Route:         route,
		Password:      in.secrets.clients,
		ProtectedMode: in.cfg.ProtectedMode,
		TLS:           in.listenTLS,
		MaxClients:    l.MaxClients,
		Version:       Version,
		Limits:        respLimits(l),
		PubSub:        in.hub,
		Watcher:       h,
	}, table, session, in.log)
	if err != nil {
		return nil, err
	}
	if u := table.Unlisted(); len(u) > 0 { // COMMAND must list every command served (clients find keys there)
		return nil, fmt.Errorf("commands without a COMMAND INFO entry: %s", strings.Join(u, ", "))
	}
	srv.SetUsers(in.secrets.users)
	srv.SetWaitLimits(l.MaxWaiters, l.MaxBlockedClients)
	return srv, nil
}

// nodeCallTimeout bounds one pub/sub or list call to one node:
// redlock.node_timeout_ms, or 2 s when that is automatic.
func (in *Instance) nodeCallTimeout() time.Duration {
	if t := in.cfg.Redlock.NodeTimeoutMS; t > 0 {
		return ms(t)
	}
	return 2 * time.Second
}

// respLimits are the limits of l that the RESP server enforces.
func respLimits(l LimitsConfig) resp.Limits {
	return resp.Limits{
		MaxBulk: l.MaxBulkBytes, MaxArgs: l.MaxArgs,
		MaxInline: l.MaxInlineBytes, MaxRequest: l.MaxRequestBytes,
		MaxBuffered: l.MaxBufferedBytes,
		AuthTimeout: ms(l.AuthTimeoutMS),
		IdleTimeout: ms(l.IdleTimeoutMS),
	}
}

// nodesInfo adds the "# Nodes" section to the session's INFO.
type nodesInfo struct {
	resp.Session
	nodes *nodeSet
}

func (s nodesInfo) Info(section string) string {
	out := s.Session.Info(section)
	if resp.Wants(section, "nodes") {
		out += s.nodes.info()
	}
	return out
}

// Addr is the RESP listener's address.
func (in *Instance) Addr() string { return in.ln.Addr().String() }

// Served delivers the RESP server's exit, once.
func (in *Instance) Served() <-chan error { return in.served }

// Shutdown drains the instance: it stops accepting and closes the client
// connections, releases every connection-bound lock it holds, then closes
// the upstream connections. ctx bounds the releases.
func (in *Instance) Shutdown(ctx context.Context) error {
	in.log.Info("draining: closing client connections and releasing connection-bound locks")
	errs := []error{in.resp.Close(ctx), in.engine.Shutdown(ctx)}
	if in.metrics != nil {
		errs = append(errs, in.metrics.Shutdown(ctx))
	}
	in.closeBackend()
	in.log.Info("drained")
	return errors.Join(errs...)
}

func (in *Instance) closeBackend() {
	for i := len(in.closers) - 1; i >= 0; i-- {
		in.closers[i]()
	}
	in.closers = nil
}

// Run serves cfg until ctx is done, then drains within drain.
func Run(ctx context.Context, cfg Config, log *zap.Logger, drain time.Duration) error {
	in, err := Start(cfg, log)
	if err != nil {
		return err
	}
	var served error
	select {
	case <-ctx.Done():
	case served = <-in.served:
	}
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	return errors.Join(served, in.Shutdown(dctx))
}

// lostFor is how the Redlock tells ev that a lock granted here is no
// longer held by a majority (a node's clock jumped): the engine's LostFor,
// which tells the holder with the reason.
func lostFor(ev engine.Events) func(key, token, reason string) {
	if l, ok := ev.(interface {
		LostFor(key, token, reason string)
	}); ok {
		return l.LostFor
	}
	return func(key, token, _ string) { ev.Lost(key, token) }
}
