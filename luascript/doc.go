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
//   - the SCRIPT cache: Cache maps SHA1s to recognised scripts.
//
// It must not interpret Lua, nor guess: a script is known only when its
// normalised text equals a catalog entry's, and anything else gets an
// *UnknownError. It holds no lock state and talks to no backend itself;
// every effect goes through Locks. docs/lock-scripts.md lists the catalog.
package luascript
