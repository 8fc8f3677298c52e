// lockproxy transaction check: ioredis multi() ... exec(), unmodified.
//
// Usage: node tx.js HOST:PORT KEY
//
// Prints "ok <step>" or "FAIL <step>: <why>"; exits 0 only if all passed.
"use strict";

const Redis = require("ioredis");

function client(addr) {
  const i = addr.lastIndexOf(":");
  return new Redis({ host: addr.slice(0, i), port: Number(addr.slice(i + 1)), maxRetriesPerRequest: 0, commandTimeout: 10000 });
}

async function main() {
  const [addr, key] = process.argv.slice(2);
  const r = client(addr);
  const other = client(addr);
  let failed = 0;
  const step = async (name, fn) => {
    let why;
    try {
      why = await fn();
    } catch (e) {
      why = String(e);
    }
    if (why) { failed++; console.log("FAIL " + name + ": " + why); } else console.log("ok " + name);
  };
  await step("multi set nx exec", async () => {
    const got = await r.multi().set(key, "tok-a", "PX", 30000, "NX").get(key).exec();
    const want = JSON.stringify([[null, "OK"], [null, "tok-a"]]);
    return JSON.stringify(got) === want ? "" : "exec() = " + JSON.stringify(got) + ", want " + want;
  });
  await step("multi set nx on a held key", async () => {
    const got = await r.multi().set(key, "tok-b", "PX", 30000, "NX").exec();
    if (JSON.stringify(got) !== JSON.stringify([[null, null]])) return "exec() = " + JSON.stringify(got);
    return (await other.get(key)) === "tok-a" ? "" : "holder changed";
  });
  await step("multi discard", async () => {
    const got = await r.multi().set(key + ":2", "tok", "PX", 30000, "NX").discard().exec().catch((e) => String(e));
    const held = await other.get(key + ":2");
    return held === null ? "" : "discard left the key held (" + JSON.stringify(got) + ")";
  });
  await step("watch, changed: null", async () => {
    await r.watch(key);
    await other.del(key);
    const got = await r.multi().set(key, "tok-c", "PX", 30000, "NX").exec();
    if (got !== null) return "exec() = " + JSON.stringify(got) + ", want null";
    return (await other.get(key)) === null ? "" : "the aborted transaction ran";
  });
  r.disconnect();
  other.disconnect();
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.log("FAIL tx.js: " + e); process.exit(1); });
