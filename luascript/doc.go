// Package luascript lets lockproxy answer EVAL and EVALSHA for the Lua lock
// scripts that popular Redis lock libraries send (redsync, bsm/redislock,
// redis-py, node-redlock, ioredis-lock, redlock-rb, Spring Integration,
// Laravel, the redis.io release script), without running Lua.
//
// It owns:
//   - recognition: Normalize turns a Lua source into a canonical token
//     stream, and Recognize looks that up in the catalog of known scripts,
//     whose sources are embedded from scripts/<library>/ (each file one
//     library's exact bytes, kept once; scripts/SOURCES.md says where each
//     came from);
//   - execution: Script.Run performs a known script as operations on the
//     caller's Locks and returns the reply, or the error, Redis would give
//     for that script on a plain Redis where each key holds its lock's token;
//   - admission: Admit parses a script outside the catalog (admit.go,
//     parse.go, typed.go) and lets it through only when it calls allowed
//     data commands (commands.go) by literal name on keys and channels
//     taken from KEYS — or concatenations onto them whose every part it
//     can type — uses no metatable, and, if it writes, nothing whose result
//     differs per node, so that it may run unchanged on every node
//     (quorum.Redlock.Eval);
//   - the SCRIPT cache: Cache maps SHA1s to catalogued or admitted scripts,
//     least recently used out.
//
// It must not interpret Lua, nor guess: a script is known only when its
// normalised text equals a catalog entry's; any other is admitted or
// refused by a static check that refuses what it cannot tell. It holds no
// lock state and talks to no backend itself; every effect of a catalogued
// script goes through Locks. docs/lock-scripts.md lists the catalog and
// the admission rules.
package luascript
