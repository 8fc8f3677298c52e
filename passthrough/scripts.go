package passthrough

import (
	"strings"
	"sync"

	"github.com/lockproxy/lockproxy/luascript"
)

// Scripts with a data Redis. A script is a lock operation when the lock
// service would run it as one; every other script is the application's and
// goes to the data Redis, where it would have run before lockproxy:
//   - Without lock_keys, a script is a lock when the catalog recognises it
//     (luascript.Recognize). EVALSHA goes to the lock service only for the
//     SHA1 of a catalogued script this router has seen (by EVAL or SCRIPT
//     LOAD); any other SHA1 goes to the data Redis, whose NOSCRIPT makes a
//     client fall back to EVAL, which is routed by its text.
//   - With lock_keys, EVAL and EVALSHA go by their keys (classify). SCRIPT
//     LOAD has no keys: a script the lock service can run (catalogued, or
//     admitted to run on the nodes, luascript.Admit) is loaded there, any
//     other is loaded on the data Redis. A client whose EVALSHA then reaches
//     the side without it gets NOSCRIPT and falls back to EVAL.
//   - SCRIPT EXISTS, FLUSH and KILL stay with the lock service.

// maxLockSHAs bounds the catalogued SHA1s a router remembers; past it the
// set starts again (a forgotten SHA1 costs one NOSCRIPT and an EVAL).
const maxLockSHAs = 4096

// lockSHAs are the SHA1s of catalogued scripts seen by a router.
type lockSHAs struct {
	mu  sync.Mutex
	set map[string]bool
}

func (s *lockSHAs) add(sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil || len(s.set) >= maxLockSHAs {
		s.set = map[string]bool{}
	}
	s.set[sha] = true
}

func (s *lockSHAs) has(sha string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set[strings.ToLower(sha)]
}

// catalogued reports whether the catalog runs src as a lock operation, and
// remembers its SHA1 if so.
func (r *Router) catalogued(src []byte) bool {
	if s, err := luascript.Recognize(src); s == nil || err != nil {
		return false
	}
	r.scripts.add(luascript.SHA1(src))
	return true
}

// classifyScript routes EVAL, EVALSHA and SCRIPT; ok is false for any
// other command.
func (r *Router) classifyScript(name string, args [][]byte) (d destination, ok bool) {
	switch {
	case name == "script" && len(args) == 3 && strings.EqualFold(string(args[1]), "load"):
		if r.catalogued(args[2]) {
			return toLocks, true
		}
		if len(r.locks) > 0 {
			if _, err := luascript.Admit(args[2]); err == nil {
				return toLocks, true
			}
		}
		return toData, true
	case len(r.locks) > 0:
		return 0, false // EVAL and EVALSHA go by their keys
	case name == "eval" && len(args) > 1:
		if r.catalogued(args[1]) {
			return toLocks, true
		}
		return toData, true
	case name == "evalsha" && len(args) > 1:
		if r.scripts.has(string(args[1])) {
			return toLocks, true
		}
		return toData, true
	}
	return 0, false
}
