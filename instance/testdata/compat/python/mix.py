"""An application's mix through one Redis address, with redis-py.

Usage: /usr/bin/python3 mix.py HOST:PORT [DATA_REDIS LOCK_NODE...]

Cache reads and writes, counters, a hash, a queue with a blocking pop,
pub/sub, a transaction, and a lock taken and released with redis-py's Lock. With the
data Redis and lock nodes given (a lockproxy run), it checks while the lock
is held that the lock is on a quorum of the lock nodes and not in the data
Redis. Prints "ok <step>" or "FAIL <step>: <why>"; exits 0 only if all passed.
Every wait is bounded.
"""

import sys
import threading

import redis


def client(addr, **kw):
    host, port = addr.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=10, **kw)


def main():
    r = client(sys.argv[1])
    others = sys.argv[2:]
    failed = 0

    def step(name, cond):
        nonlocal failed
        if cond:
            print("ok", name)
        else:
            failed += 1
            print("FAIL", name + ":", "unexpected result")

    r.set("py:cache:a", "1")
    step("cache read", r.get("py:cache:a") == b"1")
    for _ in range(5):
        r.incr("py:counter")
    step("counter", r.get("py:counter") == b"5")
    r.hset("py:user", mapping={"name": "ada", "age": "36"})
    step("hash", r.hgetall("py:user") == {b"name": b"ada", b"age": b"36"})
    popped = []
    t = threading.Thread(target=lambda: popped.append(client(sys.argv[1]).blpop(["py:queue"], timeout=10)))
    t.start()
    r.rpush("py:queue", "job1", "job2")
    t.join(15)
    step("blocking pop", popped and popped[0] == (b"py:queue", b"job1"))
    ps = client(sys.argv[1]).pubsub(ignore_subscribe_messages=True)
    ps.subscribe("py:news")
    ps.get_message(timeout=10)  # the confirmation
    r.publish("py:news", "hello")
    r.publish("py:news", "end")
    heard = []
    for _ in range(10):
        m = ps.get_message(timeout=10)
        if m:
            heard.append(m["data"])
        if heard and heard[-1] == b"end":
            break
    step("pub/sub", heard == [b"hello", b"end"])
    ps.close()
    with r.pipeline(transaction=True) as p:
        p.incr("py:tx").set("py:cache:tx", "done")
        step("transaction", p.execute() == [1, True])
    lock = r.lock("lock:py", timeout=10, blocking_timeout=5)
    step("lock acquired", lock.acquire())
    step("second owner refused", not r.lock("lock:py", timeout=10).acquire(blocking=False))
    if others:
        data, nodes = client(others[0]), [client(a) for a in others[1:]]
        step("lock not in data Redis", data.exists("lock:py") == 0)
        # each node holds the key itself with the lock's token, as one Redis would
        held = sum(n.get("lock:py") == lock.local.token for n in nodes)
        step("lock on a quorum of lock nodes", held >= 2)
    lock.release()
    step("lock released", r.lock("lock:py", timeout=10).acquire(blocking=False))
    r.delete("lock:py")
    r.set("py:cache:b", "2")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
