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
)

var (
	acquireScript = newScript("acquire", layoutLua+acquireLua)
	commitScript  = newScript("commit", layoutLua+commitLua)
	extendScript  = newScript("extend", layoutLua+extendLua)
	releaseScript = newScript("release", layoutLua+releaseLua)
	inspectScript = newScript("inspect", layoutLua+inspectLua)
	leaveScript   = newScript("leave", leaveLua)
	floorScript   = newScript("floor", layoutLua+floorLua)
	healScript    = newScript("heal", layoutLua+healLua)

	scripts = []*script{acquireScript, commitScript, extendScript, releaseScript, inspectScript, leaveScript, floorScript, healScript}
)
