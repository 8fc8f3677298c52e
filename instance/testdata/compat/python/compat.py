"""lockproxy compatibility check: redis-py's Lock, unmodified.

Usage: /usr/bin/python3 compat.py HOST:PORT

Runs the compat checklist (see server/compat_helpers_test.go) with redis-py's
own lock helper (Redis.lock / redis.lock.Lock), each step on its own key.
Prints one line per step, "ok <step>" or "FAIL <step>: <why>", and exits 0
only if every step passed. Every wait is bounded.
"""

import sys
import threading
import time
import traceback
import uuid

import redis
from redis.exceptions import LockNotOwnedError

HOLD_FOR = 0.2  # step 6: the holder releases after this (s)
SHORT_TTL = 0.4  # step 7: the lease left to expire (s)
WAIT_BOUND = 5.0  # any wait for a condition (s)


class CheckFailed(Exception):
    pass


def check(cond, why):
    if not cond:
        raise CheckFailed(why)


def new_key(step):
    return "compat-py:%s:%s" % (step, uuid.uuid4().hex)


def eventually(what, cond):
    deadline = time.monotonic() + WAIT_BOUND
    while not cond():
        if time.monotonic() > deadline:
            raise CheckFailed("not within %ss: %s" % (WAIT_BOUND, what))
        time.sleep(0.005)


def acquire_now(r, key, timeout=10):
    lock = r.lock(key, timeout=timeout)
    check(lock.acquire(blocking=False), "acquire %s: refused" % key)
    return lock


def refused(c, key):
    return not c.lock(key, timeout=10).acquire(blocking=False)


def step_acquire(r, r2, key):
    lock = r.lock(key, timeout=10)
    token = uuid.uuid4().hex
    check(lock.acquire(blocking=False, token=token), "acquire %s: refused" % key)
    check(lock.owned(), "owned() is False right after acquire")
    got = r.get(key)
    check(got == token.encode(), "GET %s = %r, want the token %r" % (key, got, token))
    pttl = r.pttl(key)
    check(0 < pttl <= 10000, "PTTL %s = %r, want in (0, 10000]" % (key, pttl))


def step_second_owner_refused(r, r2, key):
    lock = acquire_now(r, key)
    check(refused(r2, key), "a second owner acquired a held lock")
    check(lock.owned(), "the holder no longer owns the lock")


def step_extend(r, r2, key):
    lock = acquire_now(r, key)
    # extend() adds to the remaining TTL (the library reads PTTL in its script).
    check(lock.extend(20) is True, "extend(20) did not return True")
    pttl = r.pttl(key)
    check(20000 < pttl <= 30000, "PTTL after extend(20) of a 10 s lock = %r, want in (20000, 30000]" % pttl)
    check(lock.extend(60, replace_ttl=True) is True, "extend(60, replace_ttl=True) did not return True")
    pttl = r.pttl(key)
    check(50000 < pttl <= 60000, "PTTL after extend(60, replace_ttl=True) = %r, want in (50000, 60000]" % pttl)
    check(lock.reacquire() is True, "reacquire() did not return True")
    pttl = r.pttl(key)
    check(0 < pttl <= 10000, "PTTL after reacquire() = %r, want in (0, 10000]" % pttl)


def step_non_owner_release_refused(r, r2, key):
    lock = acquire_now(r, key)
    other = r2.lock(key, timeout=10)
    try:
        other.do_release(b"not-the-owner")
        raise CheckFailed("a non-owner's release (do_release with another token) did not raise LockNotOwnedError")
    except LockNotOwnedError:
        pass
    check(lock.owned(), "the holder no longer owns the lock after a non-owner's release")
    check(refused(r2, key), "a third owner acquired after a non-owner's release")


def step_owner_release(r, r2, key):
    lock = acquire_now(r, key)
    lock.release()
    check(r.get(key) is None, "GET %s = %r after release, want None" % (key, r.get(key)))
    check(not lock.locked(), "locked() is True after release")
    nxt = acquire_now(r2, key)
    check(nxt.owned(), "the next owner does not own the lock")


def step_blocking_acquire(r, r2, key):
    # thread_local=False (documented for this case): another thread releases.
    holder = r.lock(key, timeout=10, thread_local=False)
    check(holder.acquire(blocking=False), "acquire %s: refused" % key)
    released = {}

    def release_later():
        time.sleep(HOLD_FOR)
        released["at"] = time.monotonic()
        try:
            holder.release()
        except Exception as e:  # reported below
            released["err"] = e

    t = threading.Thread(target=release_later, daemon=True)
    t.start()
    with r2.lock(key, timeout=10, sleep=0.02, blocking_timeout=WAIT_BOUND) as waiter:
        got = time.monotonic()
        t.join(WAIT_BOUND)
        check(not t.is_alive(), "the holder's release did not return")
        check("err" not in released, "the holder's release: %r" % released.get("err"))
        check(got >= released["at"], "the waiter acquired before the holder released")
        check(waiter.owned(), "the waiter does not own the lock")


def step_lease_expires(r, r2, key):
    start = time.monotonic()
    short = r.lock(key, timeout=SHORT_TTL)
    check(short.acquire(blocking=False), "acquire %s with a %ss timeout: refused" % (key, SHORT_TTL))
    first = r2.lock(key, timeout=10).acquire(blocking=False)
    if first and time.monotonic() - start < SHORT_TTL:
        raise CheckFailed("another owner acquired before the %ss lease expired" % SHORT_TTL)
    check(not first, "another owner was not refused while the lease was held")
    nxt = r2.lock(key, timeout=10)
    eventually("another owner acquires after the lease expires", lambda: nxt.acquire(blocking=False))
    elapsed = time.monotonic() - start
    check(elapsed >= SHORT_TTL, "another owner acquired after %.3fs, before the %ss lease expired" % (elapsed, SHORT_TTL))
    check(nxt.owned(), "the next owner does not own the lock")
    try:
        short.release()
        raise CheckFailed("the expired owner's release did not raise LockNotOwnedError")
    except LockNotOwnedError:
        pass
    check(nxt.owned(), "the next owner lost the lock to the expired owner's release")


STEPS = [
    ("1_acquire", step_acquire),
    ("2_second_owner_refused", step_second_owner_refused),
    ("3_extend", step_extend),
    ("4_non_owner_release_refused", step_non_owner_release_refused),
    ("5_owner_release", step_owner_release),
    ("6_blocking_acquire", step_blocking_acquire),
    ("7_lease_expires", step_lease_expires),
]


def main():
    if len(sys.argv) != 2:
        print("usage: compat.py HOST:PORT", file=sys.stderr)
        return 2
    host, port = sys.argv[1].rsplit(":", 1)
    print("redis-py %s, python %s" % (redis.__version__, sys.version.split()[0]))
    # Another owner is another client (its own connections).
    r, r2 = [
        redis.Redis(host=host, port=int(port), socket_timeout=WAIT_BOUND, socket_connect_timeout=WAIT_BOUND)
        for _ in range(2)
    ]
    failed = 0
    for name, step in STEPS:
        try:
            step(r, r2, new_key(name))
            print("ok %s" % name, flush=True)
        except CheckFailed as e:
            failed += 1
            print("FAIL %s: %s" % (name, e), flush=True)
        except redis.exceptions.RedisError as e:
            failed += 1
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e), flush=True)
        except Exception as e:
            failed += 1
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e), flush=True)
            traceback.print_exc(file=sys.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
