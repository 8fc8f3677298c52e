package luascript

// The commands a script outside the catalog may call through redis.call or
// redis.pcall (admit.go), with the positions of their key arguments. Only
// data commands that act on the keys they are given: strings, hashes,
// lists, sets, sorted sets, expiry, plus PUBLISH and TIME. Commands whose
// keys depend on a count argument (ZUNIONSTORE, LMPOP, ...) or on patterns
// (SORT ... BY) are left out: the check could not tell their keys.

// keySpec says which arguments of a command are keys, counted from 1 after
// the command name: first, first+step, ... up to last (-1: the last
// argument). first 0: no keys.
type keySpec struct {
	first, last, step int
	write             bool
	channel           bool // the "key" is a channel (PUBLISH): checked as a key
}

// what names a key argument in a refusal.
func (k keySpec) what() string {
	if k.channel {
		return "channel (a script publishes only on channels passed in KEYS, checked as keys)"
	}
	return "key"
}

// isKey reports whether argument i (from 1) is a key.
func (k keySpec) isKey(i int) bool {
	return k.first > 0 && i >= k.first && (k.last < 0 || i <= k.last) && (i-k.first)%k.step == 0
}

// keysFrom reports whether some argument at or after i may be a key.
func (k keySpec) keysFrom(i int) bool {
	if k.first == 0 {
		return false
	}
	return k.last < 0 || i <= k.last
}

var (
	readOne   = keySpec{first: 1, last: 1, step: 1}
	writeOne  = keySpec{first: 1, last: 1, step: 1, write: true}
	readAll   = keySpec{first: 1, last: -1, step: 1}
	writeAll  = keySpec{first: 1, last: -1, step: 1, write: true}
	writeTwo  = keySpec{first: 1, last: 2, step: 1, write: true}
	writePair = keySpec{first: 1, last: -1, step: 2, write: true}
	noKeys    = keySpec{}
	// channelOne is PUBLISH's channel: checked as a key, so that a script
	// cannot reach lockproxy's own channels nor those outside a user's
	// patterns.
	channelOne = keySpec{first: 1, last: 1, step: 1, channel: true}
)

// allowed maps each allowed command, lower-cased, to its keys.
var allowed = map[string]keySpec{
	// strings
	"get": readOne, "set": writeOne, "setnx": writeOne, "setex": writeOne, "psetex": writeOne,
	"getset": writeOne, "getdel": writeOne, "getex": writeOne, "append": writeOne, "strlen": readOne,
	"incr": writeOne, "incrby": writeOne, "incrbyfloat": writeOne, "decr": writeOne, "decrby": writeOne,
	"getrange": readOne, "setrange": writeOne, "substr": readOne, "mget": readAll, "mset": writePair,
	"msetnx": writePair, "setbit": writeOne, "getbit": readOne, "bitcount": readOne, "bitpos": readOne,
	// keys and expiry
	"del": writeAll, "unlink": writeAll, "exists": readAll, "touch": readAll, "type": readOne,
	"expire": writeOne, "pexpire": writeOne, "expireat": writeOne, "pexpireat": writeOne,
	"ttl": readOne, "pttl": readOne, "expiretime": readOne, "pexpiretime": readOne, "persist": writeOne,
	"rename": writeTwo, "renamenx": writeTwo,
	// hashes
	"hset": writeOne, "hsetnx": writeOne, "hmset": writeOne, "hget": readOne, "hmget": readOne,
	"hdel": writeOne, "hexists": readOne, "hgetall": readOne, "hincrby": writeOne,
	"hincrbyfloat": writeOne, "hkeys": readOne, "hvals": readOne, "hlen": readOne, "hstrlen": readOne,
	"hrandfield": readOne, "hscan": readOne,
	// lists
	"lpush": writeOne, "rpush": writeOne, "lpushx": writeOne, "rpushx": writeOne, "lpop": writeOne,
	"rpop": writeOne, "llen": readOne, "lrange": readOne, "lindex": readOne, "lset": writeOne,
	"linsert": writeOne, "lrem": writeOne, "ltrim": writeOne, "lpos": readOne,
	"rpoplpush": writeTwo, "lmove": writeTwo,
	// sets
	"sadd": writeOne, "srem": writeOne, "smembers": readOne, "sismember": readOne, "smismember": readOne,
	"scard": readOne, "srandmember": readOne, "sscan": readOne, "smove": writeTwo,
	"sinter": readAll, "sunion": readAll, "sdiff": readAll,
	"sinterstore": writeAll, "sunionstore": writeAll, "sdiffstore": writeAll,
	// sorted sets
	"zadd": writeOne, "zrem": writeOne, "zscore": readOne, "zmscore": readOne, "zincrby": writeOne,
	"zcard": readOne, "zcount": readOne, "zrange": readOne, "zrangebyscore": readOne,
	"zrevrange": readOne, "zrevrangebyscore": readOne, "zrangebylex": readOne, "zrevrangebylex": readOne,
	"zlexcount": readOne, "zrank": readOne, "zrevrank": readOne, "zremrangebyrank": writeOne,
	"zremrangebyscore": writeOne, "zremrangebylex": writeOne, "zpopmin": writeOne, "zpopmax": writeOne,
	"zrandmember": readOne, "zscan": readOne, "zrangestore": writeTwo,
	// messages and time
	"publish": channelOne, "spublish": channelOne, "time": noKeys,
}

// randomResult are the allowed commands whose result differs from node to
// node, and why: a script that writes may not call them (admit.go).
var randomResult = map[string]string{
	"srandmember": "it picks members at random", "hrandfield": "it picks fields at random",
	"zrandmember": "it picks members at random", "time": "it reads the node's clock",
}

// remainingTime are the commands whose reply is a key's remaining time (or
// its expiry time): a script calling one may reply with times that differ
// slightly from node to node.
var remainingTime = map[string]bool{"ttl": true, "pttl": true, "expiretime": true, "pexpiretime": true}

// refusedBecause says why some well-known commands are not allowed.
var refusedBecause = map[string]string{
	"keys": "it reads keys that are not in KEYS", "scan": "it reads keys that are not in KEYS",
	"randomkey": "it reads keys that are not in KEYS", "dbsize": "it reads keys that are not in KEYS",
	"flushall": "it erases the node", "flushdb": "it erases the node", "swapdb": "it reaches another database",
	"select": "it reaches another database", "move": "it reaches another database", "copy": "it may reach another database",
	"config": "it administers the node", "debug": "it administers the node", "shutdown": "it administers the node",
	"save": "it administers the node", "bgsave": "it administers the node", "bgrewriteaof": "it administers the node",
	"replicaof": "it administers the node", "slaveof": "it administers the node", "acl": "it administers the node",
	"client": "it administers the node", "cluster": "it administers the node", "module": "it administers the node",
	"failover": "it administers the node", "info": "it reads the node's state",
	"eval": "it runs another script", "evalsha": "it runs another script", "eval_ro": "it runs another script",
	"evalsha_ro": "it runs another script", "script": "it runs another script", "function": "it runs another script",
	"fcall": "it runs another script", "fcall_ro": "it runs another script",
	"spop": "it removes a member picked at random, a different one on each node",
	"sort": "it may read keys named by its BY and GET patterns", "sort_ro": "it may read keys named by its BY and GET patterns",
}
