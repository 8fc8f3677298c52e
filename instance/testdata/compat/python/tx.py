"""lockproxy transaction check: redis-py's default pipeline() (a MULTI/EXEC
transaction), unmodified.

Usage: /usr/bin/python3 tx.py HOST:PORT KEY

Prints one line per step, "ok <step>" or "FAIL <step>: <why>", and exits 0
only if every step passed.
"""

import sys
import traceback

import redis


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    key = sys.argv[2]
    r = redis.Redis(host=host, port=int(port), socket_timeout=10)
    other = redis.Redis(host=host, port=int(port), socket_timeout=10)
    failed = 0

    def step(name, fn):
        nonlocal failed
        try:
            why = fn()
        except Exception as e:  # a library error is a failed step
            why = "%s: %s" % (type(e).__name__, e)
            traceback.print_exc()
        if why:
            failed += 1
            print("FAIL %s: %s" % (name, why))
        else:
            print("ok " + name)

    def take():
        p = r.pipeline()  # transaction=True by default
        p.set(key, "tok-a", nx=True, px=30000)
        p.get(key)
        got = p.execute()
        if got != [True, b"tok-a"]:
            return "execute() = %r, want [True, b'tok-a']" % (got,)
        return None

    def refused():
        p = r.pipeline()
        p.set(key, "tok-b", nx=True, px=30000)
        got = p.execute()
        if got != [None]:
            return "execute() = %r, want [None]" % (got,)
        if other.get(key) != b"tok-a":
            return "holder changed"
        return None

    def reset_unqueued():
        p = r.pipeline()
        p.set(key + ":2", "tok", nx=True, px=30000)
        p.reset()  # never sent: nothing may be held
        if other.get(key + ":2") is not None:
            return "a reset pipeline left the key held"
        return None

    def watch_changed():
        with r.pipeline() as p:
            p.watch(key)
            other.delete(key)
            p.multi()
            p.set(key, "tok-c", nx=True, px=30000)
            try:
                p.execute()
            except redis.WatchError:
                pass
            else:
                return "execute() after a watched change did not raise WatchError"
        if other.get(key) is not None:
            return "the aborted transaction ran"
        return None

    def watch_unchanged():
        with r.pipeline() as p:
            p.watch(key)
            p.multi()
            p.set(key, "tok-d", nx=True, px=30000)
            got = p.execute()
        if got != [True] or other.get(key) != b"tok-d":
            return "execute() = %r" % (got,)
        return None

    step("pipeline set nx", take)
    step("pipeline set nx on a held key", refused)
    step("reset pipeline sends nothing", reset_unqueued)
    step("watch, changed: WatchError", watch_changed)
    step("watch, unchanged: runs", watch_unchanged)
    sys.exit(1 if failed else 0)


main()
