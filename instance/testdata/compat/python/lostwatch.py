"""redis-py's watch/multi pipeline after the data Redis dropped its connection.

Usage: /usr/bin/python3 lostwatch.py HOST:PORT DATA_REDIS KEY

WATCH KEY and read it through HOST:PORT (lockproxy, or the data Redis
itself); the data Redis then kills its normal clients (as a restart would)
and another client writes KEY. The transaction that follows must raise
WatchError and write nothing. Prints "ok" last when it did; every wait is
bounded.
"""

import sys

import redis


def client(addr):
    host, port = addr.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=10)


def main():
    r, data, key = client(sys.argv[1]), client(sys.argv[2]), sys.argv[3]
    data.set(key, 5)
    outcome = "executed"
    with r.pipeline() as pipe:
        pipe.watch(key)
        seen = int(pipe.get(key))
        data.client_kill_filter(_type="normal", skipme=True)
        data.set(key, 7)
        pipe.multi()
        pipe.set(key, seen + 1)
        pipe.incr(key + ":j")
        try:
            pipe.execute()
        except redis.WatchError:
            outcome = "WatchError"
        except redis.RedisError as e:
            outcome = "%s: %s" % (type(e).__name__, e)
    value, ran = data.get(key), data.exists(key + ":j")
    print("outcome:", outcome, "value:", value, "j exists:", ran)
    if outcome != "WatchError" or value != b"7" or ran:
        sys.exit(1)
    print("ok")


main()
