package upstream

import (
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

// claimStates maps acquire.lua's first reply field to a ClaimState.
var claimStates = map[int64]quorum.ClaimState{
	0: quorum.Taken,
	1: quorum.Acquired,
	2: quorum.Mine,
}

// claim reads acquire.lua's reply {state, counter, fence}, whose last field
// is instead the other holder's remaining PTTL in ms when the key is taken. A
// lock without an expiry (pttl -1, which lockproxy never writes) reads as
// Held 0.
func claim(v any) (quorum.Claim, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return quorum.Claim{}, badReply(acquireScript.name, v)
	}
	code, ok1 := a[0].(int64)
	counter, ok2 := a[1].(int64)
	last, ok3 := a[2].(int64)
	state, ok4 := claimStates[code]
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return quorum.Claim{}, badReply(acquireScript.name, v)
	}
	if state == quorum.Taken {
		return quorum.Claim{State: state, Counter: counter, Held: time.Duration(max(last, 0)) * time.Millisecond}, nil
	}
	return quorum.Claim{State: state, Counter: counter, Fence: last}, nil
}

// flag reads the 1 or 0 reply of commit and leave.
func flag(s *script, v any) (bool, error) {
	i, ok := v.(int64)
	if !ok || (i != 0 && i != 1) {
		return false, badReply(s.name, v)
	}
	return i == 1, nil
}

// floored reads floor.lua's reply: {1, the counter recorded for the
// process: the node's counter after its first raise}.
func floored(v any) (bool, int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return false, 0, badReply(floorScript.name, v)
	}
	one, ok1 := a[0].(int64)
	c, ok2 := a[1].(int64)
	if !ok1 || !ok2 || one != 1 || c < 0 {
		return false, 0, badReply(floorScript.name, v)
	}
	return true, c, nil
}

// released reads release.lua's reply: 0, or {1, the attempt of the hold
// deleted ("" if not recorded)}.
func released(v any) (bool, string, error) {
	if i, ok := v.(int64); ok && i == 0 {
		return false, "", nil
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return false, "", badReply(releaseScript.name, v)
	}
	one, ok1 := a[0].(int64)
	attempt, ok2 := a[1].(string)
	if !ok1 || !ok2 || one != 1 {
		return false, "", badReply(releaseScript.name, v)
	}
	return true, attempt, nil
}

// entry reads inspect.lua's reply {token, fence, mode, name, pttl[, type]},
// or {} for a free key. A key lockproxy did not write (mode "": a value of
// another type, with token "", or a string) is a lease of its own PTTL;
// one without an expiry (pttl -1, which lockproxy never writes) is held
// for ever, and reads as bound (PTTL -1) with TTL forever.
func entry(v any) (quorum.Entry, bool, error) {
	a, ok := v.([]any)
	if !ok || (len(a) != 0 && len(a) != 5 && len(a) != 6) {
		return quorum.Entry{}, false, badReply(inspectScript.name, v)
	}
	if len(a) == 0 {
		return quorum.Entry{}, false, nil
	}
	token, ok1 := a[0].(string)
	fence, ok2 := a[1].(int64)
	mode, ok3 := a[2].(string)
	name, ok4 := a[3].(string)
	pttl, ok5 := a[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return quorum.Entry{}, false, badReply(inspectScript.name, v)
	}
	e := quorum.Entry{Token: token, Fence: fence, Mode: engine.Mode(mode), Name: name, TTL: time.Duration(max(pttl, 0)) * time.Millisecond}
	if len(a) == 6 {
		if e.Type, ok = a[5].(string); !ok || e.Type == "" {
			return quorum.Entry{}, false, badReply(inspectScript.name, v)
		}
	}
	switch {
	case pttl == -1:
		e.Mode, e.TTL = engine.Bound, forever
	case mode == "":
		e.Mode = engine.Lease
	}
	return e, true, nil
}

// forever is the TTL that Inspect reports for a lock key without an
// expiry, which only something other than lockproxy writes on a node (a
// script, an operator): about a century.
const forever = 100 * 365 * 24 * time.Hour

// decode fills r from a script's raw reply v to an operation of kind k.
func decode(k quorum.OpKind, v any, r *quorum.Reply) (err error) {
	switch k {
	case quorum.OpAcquire:
		r.Claim, err = claim(v)
	case quorum.OpCommit:
		r.OK, err = flag(commitScript, v)
	case quorum.OpExtend:
		err = extended(v, r)
	case quorum.OpHeal:
		r.TTL, err = healed(v)
	case quorum.OpRelease:
		r.OK, r.Attempt, err = released(v)
	case quorum.OpLeave:
		r.OK, err = flag(leaveScript, v)
	case quorum.OpInspect:
		r.Entry, r.OK, err = entry(v)
	case quorum.OpFloor:
		r.OK, r.Claim.Counter, err = floored(v)
	}
	return err
}

// extended reads extend.lua's reply into r: {ttl, fence, attempt, mode,
// name} where the token holds the key (the TTL applied in ms), {0, the
// node's clock in ms} where the key is free, {0} where another holds it,
// {-1} where a bound renewal found a lease.
func extended(v any, r *quorum.Reply) error {
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return badReply(extendScript.name, v)
	}
	ms, ok := a[0].(int64)
	switch {
	case !ok || ms < -1:
		return badReply(extendScript.name, v)
	case ms <= 0 && len(a) == 1:
	case ms == 0 && len(a) == 2:
		if r.FreeAt, ok = a[1].(int64); !ok || r.FreeAt <= 0 {
			return badReply(extendScript.name, v)
		}
	case ms > 0 && len(a) == 5:
		fence, ok1 := a[1].(int64)
		attempt, ok2 := a[2].(string)
		mode, ok3 := a[3].(string)
		name, ok4 := a[4].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return badReply(extendScript.name, v)
		}
		r.Entry = quorum.Entry{Fence: fence, Mode: engine.Mode(mode), Name: name}
		r.Attempt = attempt
	default:
		return badReply(extendScript.name, v)
	}
	r.TTL = time.Duration(ms) * time.Millisecond
	return nil
}

// healed reads heal.lua's reply: the TTL given in ms, 0 if it took nothing.
func healed(v any) (time.Duration, error) {
	ms, ok := v.(int64)
	if !ok || ms < 0 {
		return 0, badReply(healScript.name, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
