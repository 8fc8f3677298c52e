module github.com/lockproxy/lockproxy/bench

go 1.26.8

require (
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/go-zookeeper/zk v1.0.4
	github.com/lockproxy/lockproxy v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/zap v1.28.0
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/tidwall/btree v1.1.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/redcon v1.6.2 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/lockproxy/lockproxy => ../

replace github.com/go-zookeeper/zk => ../third_party/go-zookeeper/zk
