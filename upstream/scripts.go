package upstream

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"
)

// script is a Lua script with the SHA1 that EVALSHA names it by.
type script struct {
	name string
	src  string
	sha  string
	body string // the script without its preludes (batchable scripts)
	op   byte   // its number in opsScript, 0 when not in it
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// withPreludes is the script body after preludes.
func withPreludes(name, preludes, body string) *script {
	s := newScript(name, preludes+body)
	s.body = body
	return s
}

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/commit.lua
	commitLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/leave.lua
	leaveLua string
	//go:embed scripts/floor.lua
	floorLua string
	//go:embed scripts/heal.lua
	healLua string
	//go:embed scripts/layout.lua
	layoutLua string
	//go:embed scripts/meta.lua
	metaLua string
	//go:embed scripts/ops.lua
	opsLua string
)

// Each script gets only the preludes it calls: layout.lua for the node's
// counter, meta.lua for a lock's meta.
var (
	acquireScript = withPreludes("acquire", layoutLua+metaLua, acquireLua)
	commitScript  = withPreludes("commit", layoutLua+metaLua, commitLua)
	extendScript  = withPreludes("extend", layoutLua+metaLua, extendLua)
	releaseScript = withPreludes("release", metaLua, releaseLua)
	inspectScript = withPreludes("inspect", metaLua, inspectLua)
	leaveScript   = withPreludes("leave", "", leaveLua)
	floorScript   = withPreludes("floor", layoutLua, floorLua)
	healScript    = withPreludes("heal", layoutLua+metaLua, healLua)

	scripts = []*script{acquireScript, commitScript, extendScript, releaseScript, inspectScript, leaveScript, floorScript, healScript, opsScript}
)

// opsScript runs several calls of lockproxy's own scripts in one call
// (conn.go sends those a batch has in a row this way): the node's cost of
// a script call is mostly its own, before the script runs (taking its
// arguments, building KEYS and ARGV, its bookkeeping), which one call
// then pays once for all of them. Each script's body is a function of
// KEYS and ARGV here, its text unchanged: the parameters shadow the
// globals. ARGV[1] holds three bytes per call: its script's number (op),
// its count of keys and of arguments; KEYS and the rest of ARGV are the
// calls' own, in order. Each runs under pcall, in order, so that an error
// in one (a command's, such as WRONGTYPE or OOM, or Lua's, as "ERR ...")
// is that call's error reply alone and the calls after it run as they
// would have on their own. The reply is an array of the calls' replies
// (a null one as a nested null): Redis turns a reply nested in an array
// into RESP as it turns a script's own.
var opsScript = newOps(layoutLua+metaLua, acquireScript, commitScript, extendScript, releaseScript, inspectScript, leaveScript, floorScript, healScript)

func newOps(preludes string, ss ...*script) *script {
	var b strings.Builder
	b.WriteString(preludes + "local ops = {}\n")
	for i, s := range ss {
		s.op = byte(i + 1)
		fmt.Fprintf(&b, "ops[%d] = function(KEYS, ARGV) -- %s\n%s\nend\n", s.op, s.name, s.body)
	}
	b.WriteString(opsLua)
	return newScript("ops", b.String())
}
