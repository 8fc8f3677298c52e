// An application's mix through one Redis address, with ioredis and
// node-redlock.
//
// Usage: node mix.js HOST:PORT [DATA_REDIS LOCK_NODE...]
//
// Cache reads and writes, counters, a hash, a queue with a blocking pop, a
// transaction (MULTI/EXEC), and a lock taken and released with node-redlock.
// With the data Redis and lock nodes given (a lockproxy run), it checks
// while the lock is held that the lock is on a quorum of the lock nodes and
// not in the data Redis. Prints "ok <step>" or "FAIL <step>: <why>"; exits 0
// only if all passed. Every wait is bounded.
"use strict";

const Redis = require("ioredis");
const Redlock = require("redlock").default;

function client(addr) {
  const [host, port] = [addr.slice(0, addr.lastIndexOf(":")), Number(addr.slice(addr.lastIndexOf(":") + 1))];
  return new Redis({ host, port, maxRetriesPerRequest: 0, commandTimeout: 10000, lazyConnect: false });
}

async function main() {
  const [addr, ...others] = process.argv.slice(2);
  const r = client(addr);
  const popper = client(addr);
  let failed = 0;
  const step = (name, cond) => {
    if (cond) console.log("ok " + name);
    else { failed++; console.log("FAIL " + name + ": unexpected result"); }
  };
  try {
    await r.set("js:cache:a", "1");
    step("cache read", (await r.get("js:cache:a")) === "1");
    for (let i = 0; i < 5; i++) await r.incr("js:counter");
    step("counter", (await r.get("js:counter")) === "5");
    await r.hset("js:user", { name: "ada", age: "36" });
    step("hash", (await r.hget("js:user", "name")) === "ada");
    const pop = popper.blpop("js:queue", 10);
    await r.rpush("js:queue", "job1", "job2");
    const popped = await pop;
    step("blocking pop", popped && popped[1] === "job1");
    const sub = client(addr);
    const got = [];
    const heard = new Promise((resolve) => {
      sub.on("message", (ch, msg) => {
        got.push(ch + "=" + msg);
        if (msg === "end") resolve();
      });
    });
    await sub.subscribe("js:news");
    await r.publish("js:news", "hello");
    await r.publish("js:news", "end");
    await Promise.race([heard, new Promise((resolve) => setTimeout(resolve, 10000))]);
    step("pub/sub", got.join(",") === "js:news=hello,js:news=end");
    sub.disconnect();
    const tx = await r.multi().incr("js:tx").set("js:cache:tx", "done").exec();
    step("transaction", tx && tx[0][1] === 1 && tx[1][1] === "OK");
    const redlock = new Redlock([r], { retryCount: 0 });
    const lock = await redlock.acquire(["lock:js"], 10000);
    step("lock acquired", !!lock);
    if (others.length > 0) {
      const data = client(others[0]);
      step("lock not in data Redis", (await data.exists("lock:js")) === 0);
      let held = 0;
      for (const a of others.slice(1)) {
        const n = client(a);
        // each node holds the key itself with the lock's value, as one Redis would
        held += (await n.get("lock:js")) === lock.value ? 1 : 0;
        n.disconnect();
      }
      step("lock on a quorum of lock nodes", held >= 2);
      data.disconnect();
    }
    await lock.release();
    step("lock released", (await r.set("lock:js", "x", "PX", 1000, "NX")) === "OK");
    await r.del("lock:js");
    await r.set("js:cache:b", "2");
  } catch (e) {
    failed++;
    console.log("FAIL mix: " + (e && e.stack ? e.stack : e));
  } finally {
    r.disconnect();
    popper.disconnect();
  }
  process.exit(failed ? 1 : 0);
}

main();
