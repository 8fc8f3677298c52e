package upstream

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
)

// script is a Lua script with the SHA1 that EVALSHA names it by.
type script struct {
	name string
	src  string
	sha  string
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
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
)

// Each script gets only the preludes it calls: layout.lua for the node's
// counter, meta.lua for a lock's meta.
var (
	acquireScript = newScript("acquire", layoutLua+metaLua+acquireLua)
	commitScript  = newScript("commit", layoutLua+metaLua+commitLua)
	extendScript  = newScript("extend", layoutLua+metaLua+extendLua)
	releaseScript = newScript("release", metaLua+releaseLua)
	inspectScript = newScript("inspect", metaLua+inspectLua)
	leaveScript   = newScript("leave", leaveLua)
	floorScript   = newScript("floor", layoutLua+floorLua)
	healScript    = newScript("heal", layoutLua+metaLua+healLua)

	scripts = []*script{acquireScript, commitScript, extendScript, releaseScript, inspectScript, leaveScript, floorScript, healScript}
)
