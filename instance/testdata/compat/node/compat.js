// lockproxy compatibility check: node-redlock and ioredis, unmodified.
//
// Usage: node compat.js HOST:PORT
//
// Runs the compat checklist (see server/compat_helpers_test.go) twice, each
// step on its own key:
//   redlock/...  with node-redlock's acquire / extend / release / using;
//   ioredis/...  with what ioredis users write by hand: SET NX PX, and
//                compare-and-delete / compare-and-PEXPIRE via defineCommand.
// Another owner is always another client (connection). Prints one line per
// step, "ok <step>" or "FAIL <step>: <why>", and exits 0 only if every step
// passed. Every wait is bounded.
"use strict";

const crypto = require("crypto");
const path = require("path");
const Redis = require("ioredis");
const Redlock = require("redlock").default;
const { Lock, ExecutionError } = require("redlock");

const HOLD_FOR = 200; // step 6: the holder releases after this (ms)
const SHORT_TTL = 400; // step 7: the lease left to expire (ms)
const WAIT_BOUND = 5000; // any wait for a condition (ms)

class CheckFailed extends Error {}

function check(cond, why) {
  if (!cond) throw new CheckFailed(why);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function newKey(step) {
  return `compat-node:${step}:${crypto.randomBytes(8).toString("hex")}`;
}

function token() {
  return crypto.randomBytes(16).toString("hex");
}

async function eventually(what, cond) {
  const deadline = Date.now() + WAIT_BOUND;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new CheckFailed(`not within ${WAIT_BOUND}ms: ${what}`);
    await sleep(5);
  }
}

// bounded fails a step that does not settle within WAIT_BOUND (a hung reply).
function bounded(p, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailed(`${what}: no answer within ${WAIT_BOUND}ms`)), WAIT_BOUND);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

// rejects returns the error p rejects with, or fails the step if it resolves.
async function rejects(p, what) {
  try {
    const v = await p;
    throw new CheckFailed(`${what}: resolved (${describe(v)}), want a rejection`);
  } catch (e) {
    if (e instanceof CheckFailed) throw e;
    return e;
  }
}

function describe(v) {
  if (v instanceof Lock) return `Lock{value: ${v.value}}`;
  return JSON.stringify(v);
}

async function wantHolder(c, key, value) {
  const got = await c.get(key);
  check(got === value, `GET ${key} = ${JSON.stringify(got)}, want the holder's token ${JSON.stringify(value)}`);
}

async function wantFree(c, key) {
  const got = await c.get(key);
  check(got === null, `GET ${key} = ${JSON.stringify(got)}, want null`);
}

async function wantPTTL(c, key, lo, hi) {
  const got = await c.pttl(key);
  check(got > lo && got <= hi, `PTTL ${key} = ${got}, want in (${lo}, ${hi}]`);
}

// ---- node-redlock -----------------------------------------------------

function redlockSteps(a, b) {
  // One Redlock per client: the address is the whole cluster to redlock.
  const ra = new Redlock([a]);
  const rb = new Redlock([b]);
  const once = { retryCount: 0 };

  // A lock handle with another owner's value (Lock is redlock's export).
  const notOwner = (key) => new Lock(ra, [key], "not-the-owner", [], Date.now() + 10000);

  const wantRefused = async (r, key, what) => {
    const e = await rejects(r.acquire([key], 10000, once), what);
    check(e instanceof ExecutionError, `${what}: ${e}, want an ExecutionError (no quorum)`);
  };

  return [
    ["1_acquire", async (key) => {
      const lock = await ra.acquire([key], 10000, once);
      await wantHolder(a, key, lock.value);
      await wantPTTL(a, key, 0, 10000);
    }],
    ["2_second_owner_refused", async (key) => {
      const lock = await ra.acquire([key], 10000, once);
      await wantRefused(rb, key, "a second owner's acquire");
      await wantHolder(a, key, lock.value);
    }],
    ["3_extend", async (key) => {
      const lock = await ra.acquire([key], 10000, once);
      const longer = await lock.extend(30000);
      check(longer.value === lock.value, "extend returned a lock with another value");
      await wantPTTL(a, key, 20000, 30000);
      const e = await rejects(rb.extend(notOwner(key), 60000, once), "a non-owner's extend");
      check(e instanceof ExecutionError, `a non-owner's extend: ${e}, want an ExecutionError`);
      await wantPTTL(a, key, 20000, 30000);
      await wantHolder(a, key, lock.value);
    }],
    ["4_non_owner_release_refused", async (key) => {
      const lock = await ra.acquire([key], 10000, once);
      const e = await rejects(rb.release(notOwner(key), once), "a non-owner's release");
      check(e instanceof ExecutionError, `a non-owner's release: ${e}, want an ExecutionError`);
      await wantHolder(a, key, lock.value);
      await wantRefused(rb, key, "a third owner's acquire after the refused release");
    }],
    ["5_owner_release", async (key) => {
      const lock = await ra.acquire([key], 10000, once);
      await lock.release();
      await wantFree(a, key);
      const next = await rb.acquire([key], 10000, once);
      await wantHolder(b, key, next.value);
    }],
    ["6_blocking_acquire", async (key) => {
      const holder = await ra.acquire([key], 10000, once);
      let releasedAt;
      const releasing = sleep(HOLD_FOR).then(() => {
        releasedAt = Date.now();
        return holder.release();
      });
      // The library's retry mode: up to 200 attempts, 20 ms apart.
      const waiter = await rb.acquire([key], 10000, { retryCount: 200, retryDelay: 20, retryJitter: 5 });
      const got = Date.now();
      await bounded(releasing, "the holder's release");
      check(got >= releasedAt, "the waiter acquired before the holder released");
      await wantHolder(b, key, waiter.value);
    }],
    ["7_lease_expires", async (key) => {
      const start = Date.now();
      const short = await ra.acquire([key], SHORT_TTL, once);
      try {
        await rb.acquire([key], 10000, once);
        throw new CheckFailed(Date.now() - start < SHORT_TTL
          ? `another owner acquired before the ${SHORT_TTL}ms lease expired`
          : "another owner was not refused (too slow to tell)");
      } catch (e) {
        if (e instanceof CheckFailed) throw e;
        check(e instanceof ExecutionError, `another owner's acquire: ${e}, want an ExecutionError`);
      }
      let next;
      await eventually("another owner acquires after the lease expires", async () => {
        try {
          next = await rb.acquire([key], 10000, once);
          return true;
        } catch (e) {
          if (!(e instanceof ExecutionError)) throw e;
          return false;
        }
      });
      const elapsed = Date.now() - start;
      check(elapsed >= SHORT_TTL, `another owner acquired after ${elapsed}ms, before the ${SHORT_TTL}ms lease expired`);
      await wantHolder(b, key, next.value);
      const e = await rejects(ra.release(short, once), "the expired owner's release");
      check(e instanceof ExecutionError, `the expired owner's release: ${e}, want an ExecutionError`);
      await wantHolder(b, key, next.value);
    }],
    ["8_using_auto_extends", async (key) => {
      // using() extends a 700 ms lock automatically (threshold 500 ms) while
      // the routine runs for 1 s, then releases it.
      let during;
      await ra.using([key], 700, once, async (signal) => {
        await sleep(1000);
        check(!signal.aborted, `the lock was lost during the routine: ${signal.error}`);
        const e = await rejects(rb.acquire([key], 10000, once), "another owner's acquire during using()");
        check(e instanceof ExecutionError, `another owner's acquire during using(): ${e}`);
        during = await a.get(key);
      });
      check(during !== null, "the key was gone during using()");
      await wantFree(a, key);
    }],
  ];
}

// ---- ioredis by hand --------------------------------------------------

const COMPARE_AND_DELETE = `if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
else
  return 0
end`;

const COMPARE_AND_PEXPIRE = `if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("pexpire", KEYS[1], ARGV[2])
else
  return 0
end`;

function ioredisSteps(a, b) {
  for (const c of [a, b]) {
    c.defineCommand("unlock", { numberOfKeys: 1, lua: COMPARE_AND_DELETE });
    c.defineCommand("extendLock", { numberOfKeys: 1, lua: COMPARE_AND_PEXPIRE });
  }
  const lockNow = async (c, key, ms = 10000) => {
    const t = token();
    const reply = await c.set(key, t, "PX", ms, "NX");
    check(reply === "OK", `SET ${key} ${t} PX ${ms} NX = ${JSON.stringify(reply)}, want "OK"`);
    return t;
  };
  const wantRefused = async (c, key, what) => {
    const reply = await c.set(key, token(), "NX", "PX", 10000);
    check(reply === null, `${what}: SET NX PX = ${JSON.stringify(reply)}, want null`);
  };

  return [
    ["1_acquire", async (key) => {
      const t = await lockNow(a, key);
      await wantHolder(a, key, t);
      await wantPTTL(a, key, 0, 10000);
    }],
    ["2_second_owner_refused", async (key) => {
      const t = await lockNow(a, key);
      await wantRefused(b, key, "a second owner");
      await wantHolder(a, key, t);
    }],
    ["3_extend", async (key) => {
      const t = await lockNow(a, key);
      let n = await a.extendLock(key, t, 30000);
      check(n === 1, `owner's compare-and-pexpire = ${n}, want 1`);
      await wantPTTL(a, key, 20000, 30000);
      n = await b.extendLock(key, "not-the-owner", 60000);
      check(n === 0, `non-owner's compare-and-pexpire = ${n}, want 0`);
      await wantPTTL(a, key, 20000, 30000);
    }],
    ["4_non_owner_release_refused", async (key) => {
      const t = await lockNow(a, key);
      const n = await b.unlock(key, "not-the-owner");
      check(n === 0, `non-owner's compare-and-delete = ${n}, want 0`);
      await wantHolder(a, key, t);
      await wantRefused(b, key, "a third owner after the refused release");
    }],
    ["5_owner_release", async (key) => {
      const t = await lockNow(a, key);
      const n = await a.unlock(key, t);
      check(n === 1, `owner's compare-and-delete = ${n}, want 1`);
      await wantFree(a, key);
      const next = await lockNow(b, key);
      await wantHolder(b, key, next);
    }],
    ["6_blocking_acquire", async (key) => {
      const t = await lockNow(a, key);
      let releasedAt;
      const releasing = sleep(HOLD_FOR).then(async () => {
        releasedAt = Date.now();
        const n = await a.unlock(key, t);
        check(n === 1, `the holder's compare-and-delete = ${n}, want 1`);
      });
      // The usual hand-written spin: SET NX PX every 20 ms until a deadline.
      const mine = token();
      const deadline = Date.now() + WAIT_BOUND;
      let got;
      while (Date.now() < deadline) {
        if ((await b.set(key, mine, "PX", 10000, "NX")) === "OK") {
          got = Date.now();
          break;
        }
        await sleep(20);
      }
      await bounded(releasing, "the holder's release");
      check(got !== undefined, `the waiter did not acquire within ${WAIT_BOUND}ms`);
      check(got >= releasedAt, "the waiter acquired before the holder released");
      await wantHolder(b, key, mine);
    }],
    ["7_lease_expires", async (key) => {
      const start = Date.now();
      const t = await lockNow(a, key, SHORT_TTL);
      const reply = await b.set(key, token(), "NX", "PX", 10000);
      if (reply !== null) {
        throw new CheckFailed(Date.now() - start < SHORT_TTL
          ? `another owner acquired before the ${SHORT_TTL}ms lease expired`
          : "another owner was not refused (too slow to tell)");
      }
      const mine = token();
      await eventually("another owner acquires after the lease expires",
        async () => (await b.set(key, mine, "NX", "PX", 10000)) === "OK");
      const elapsed = Date.now() - start;
      check(elapsed >= SHORT_TTL, `another owner acquired after ${elapsed}ms, before the ${SHORT_TTL}ms lease expired`);
      const n = await a.unlock(key, t);
      check(n === 0, `the expired owner's compare-and-delete = ${n}, want 0`);
      await wantHolder(b, key, mine);
    }],
  ];
}

// ---- main -------------------------------------------------------------

async function main() {
  const addr = process.argv[2];
  if (!addr) {
    console.error("usage: node compat.js HOST:PORT");
    return 2;
  }
  const i = addr.lastIndexOf(":");
  const opts = {
    host: addr.slice(0, i),
    port: Number(addr.slice(i + 1)),
    commandTimeout: WAIT_BOUND,
    connectTimeout: WAIT_BOUND,
    lazyConnect: true,
  };
  const clients = [];
  const client = async () => {
    const c = new Redis(opts);
    clients.push(c);
    c.on("error", () => {}); // reported by the command that fails
    await c.connect();
    return c;
  };
  const version = (m) => require(path.join(__dirname, "node_modules", m, "package.json")).version;
  console.log(`node ${process.version}, ioredis ${version("ioredis")}, redlock ${version("redlock")}`);

  let failed = 0;
  try {
    const [a, b] = [await client(), await client()];
    const suites = [["redlock", redlockSteps(a, b)], ["ioredis", ioredisSteps(a, b)]];
    for (const [suite, steps] of suites) {
      for (const [name, step] of steps) {
        const label = `${suite}/${name}`;
        try {
          await bounded(step(newKey(label)), label);
          console.log(`ok ${label}`);
        } catch (e) {
          failed++;
          console.log(`FAIL ${label}: ${e instanceof CheckFailed ? e.message : `${e.name}: ${e.message}`}`);
          if (!(e instanceof CheckFailed) && !(e instanceof ExecutionError) && !(e instanceof Redis.ReplyError)) {
            console.log(e.stack);
          }
          if (e instanceof ExecutionError) {
            for (const attempt of e.attempts) {
              const stats = await attempt;
              for (const err of stats.votesAgainst.values()) console.log(`  vote against: ${err.name}: ${err.message}`);
            }
          }
        }
      }
    }
  } catch (e) {
    failed++;
    console.log(`FAIL setup: ${e.name}: ${e.message}`);
  } finally {
    for (const c of clients) c.disconnect();
  }
  return failed ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => {
  console.log(`FAIL main: ${e.stack}`);
  process.exit(1);
});
