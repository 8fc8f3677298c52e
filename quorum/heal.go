package quorum

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Healing a held lock onto nodes that lost it.
//
// A node that restarted empty (no fsync), or that missed a grant, does not
// hold a lock that a majority of nodes still holds, and an extension alone
// never puts it back there: a lock renewed for hours then rests on a bare
// majority, and the next single node to restart loses it, although a
// majority of nodes was up and counted at every moment. So, like redsync's
// "extend or lock", a renewal (Extend: the watchdog's, RENEW, a
// lock-delay) that a majority granted takes the key again (OpHeal) on
// every counted node that answered that the key is free there, with the
// token, the fence and the attempt the holders record: the node's fencing
// counter is raised to at least the fence, so that no later grant there
// counts at or below it, and the hold is one that releases and extensions
// bound to the attempt still match, and that no rollback deletes.
//
// What a heal never does:
//   - take a key that anything holds on the node (another token, a value of
//     another type, the token itself): heal.lua takes only a free key;
//   - heal from a round that a majority did not grant, or whose holders
//     do not all record the same fence and attempt;
//   - heal a node that the restart rule holds out: its answer does not
//     count (restart.go), so it is nobody's heal target;
//   - make the lock live longer than the validity the holder was told: the
//     healed key's TTL runs out when that validity does, measured on the
//     node's own clock from the moment the node found the key free (the
//     extension's reply carries the node's clock), and a heal that lands
//     after that takes nothing;
//   - undo a release. A release that reaches the node after the
//     extension found the key free there, and before the heal lands, finds
//     the key free (or another's) and leaves a mark there (release.lua),
//     the node's clock; a heal takes nothing where a mark is at or after
//     the moment the extension found the key free. The mark lasts
//     markFor, at least as long as any heal's validity (see markFor), so
//     it outlasts every heal that could still land. A release that lands
//     after the heal deletes the healed key like any other. A release that
//     never reaches the node is the case of a release that misses a node
//     without healing: the node keeps the lock for what is left of the
//     validity the holder was told, no longer;
//   - come back after a later grant, or after the holder's release.
//     Whatever takes the key on the node after the extension found it
//     free there (an acquire of any token, another heal, a client's
//     script under its turn, the repair of the node by the majority's
//     state) raises the mark by one (acquire.lua, heal.lua, upstream's
//     GuardStated, repair.lua), so that the heal takes nothing once that
//     hold is gone: a release that deletes a hold leaves no mark, and the
//     heal would otherwise follow a grant of another token, made and
//     released meanwhile, with its older fence, or, after the holder's own
//     late acquire or retry took the node and its release deleted that
//     hold, give the released holder a majority again with the node the
//     release missed.
//
// A release that deletes a hold leaves its meta (Op.MetaFor): every
// script that writes a lock's meta gives it the key's TTL plus
// metaGrace, and release.lua deletes the key alone. An extension that
// finds the key free beside a meta, of any token, answers that it is not
// held rather than free, so no heal is decided from it: that tells a node
// where a hold was released (or ended with its lease) from one that missed
// the grant or restarted empty, for as long as it matters. An extension's
// answer counts only within its node timeout (a later one is its call's
// error), so one found free at the node landed no later than that after
// the renewal was sent; a release or a grant that the renewal's majority
// did not see (else it would not be granted) landed on some node after
// the renewal's extension there, and on every node no earlier than its
// own node timeout before that; the meta of the hold it deleted or took,
// kept metaGrace (two node timeouts and a second) past the key, is there
// when the extension lands. Without the meta
// (TestAttackMarkExtensionLandsAfterRelease), a renewal's extension held
// up on its link, landing after the holder's release and another grant
// there, found the key free and healed it with the old fence: with a node
// that missed the release, the released holder held a majority again,
// and its LOCK … TOKEN answered 10 after another grant's 11.
//
// What it leaves: a renewal heals only from "free" answers that came
// within MaxNodeTimeout of its start (freeWithin), whatever its own node
// timeout, and a grant's meta is its own, as is the meta that describes
// nobody a release leaves (release.lua): each is kept the writing
// instance's own grace, which covers its own node timeout
// (TestAttackX2ReleaseSpreadOverALongerNodeTimeout: a release spread over
// 8 s through an instance with a 15 s node timeout); a release
// carried on to silent nodes after an undecided release (carry.go) may
// land later than that, and the holder told "outcome unknown" may then
// hold a majority again, no longer than the validity a renewal told it,
// as when a release misses nodes. A node restarted empty has lost the
// meta with the key: the restart rule holds it out for max_lease_ms after
// its start, which can be shorter than the grace, so a renewal heals onto
// it only from metaGrace after its start (healsFrom): this instance's
// grace, shorter than the meta a release through an instance with a longer
// node timeout left there before the restart.

// metaGrace is how much longer than its key a lock's meta is kept
// (Op.MetaFor): two of the longest node timeouts, a renewal's and a
// release's or a grant's, and a second for the nodes' clocks.
func (r *Redlock) metaGrace() time.Duration {
	return 2*max(r.cfg.NodeTimeout, MaxNodeTimeout) + time.Second
}

// markFor is how long a release marks a key it found free or another's
// (Op.MarkFor), and the longest validity a heal may carry: with the
// restart rule on, the longest lease (no validity is longer); without it,
// UndoGrace, and a renewal whose validity is longer heals nothing.
func (r *Redlock) markFor() time.Duration {
	if r.cfg.MaxLease > 0 {
		return r.cfg.MaxLease
	}
	return UndoGrace
}

// renewal gathers what the replies of one extension say for a heal.
type renewal struct {
	holders int    // nodes that extended the hold
	fence   int64  // the fence the first of them records
	attempt string // and its attempt
	mode    engine.Mode
	name    string
	split   bool       // holders disagree on the fence or the attempt
	free    []freeNode // counted nodes where the key is free
	// freeBy is when a "free" answer stops counting toward a heal: the
	// extension's start plus MaxNodeTimeout (freeWithin).
	freeBy time.Time
	// started is when the extension started (healsFrom).
	started time.Time
}

// freeWithin is how long after a renewal starts an answer that the key is
// free still counts toward a heal, whatever the instance's node timeout:
// every meta outlives its key by at least two of it and a second
// (metaGrace), which covers an extension that lands that late and a
// release or a grant spread over the writing instance's own node timeout.
// An instance with node_timeout_ms above it waits longer for an
// extension's answer, and one that came later, from a node where the meta
// of a hold released there, or of a grant made there since, had already
// ended, healed the released hold back
// (TestAttackExtensionOfALongerNodeTimeout: fence 10 after 11).
const freeWithin = MaxNodeTimeout

// healsFrom is the earliest start of a renewal that may heal onto node i
// from its answer that the key is free: metaGrace (and drift) after the
// latest start of the node's process, where the restart rule saw it
// restart (or first saw it). A node restarted empty has lost the metas
// that releases and grants left there, and the restart rule holds it out
// only max_lease_ms after its start: counted again sooner than the grace,
// it answered "free" where a release had deleted the key just before the
// restart, while that release was still on its way to another node, and
// the heal gave the released holder the node back
// (TestAttackX2RestartLosesTheReleasesMeta). From metaGrace after its
// start, every meta it lost would have ended anyway. A node whose clock
// stepped forward dropped its metas early all the same, and its clock
// hold-out is as short: it is healed only from metaGrace after the step
// was seen (clockHolds.dropped), the restart rule on or off.
func (r *Redlock) healsFrom(i int) time.Time {
	var start time.Time
	if t := r.trust; t != nil {
		t.mu.RLock()
		start = t.nodes[i].start
		t.mu.RUnlock()
	}
	c := r.clock
	c.mu.Lock()
	if c.dropped[i].After(start) {
		start = c.dropped[i]
	}
	c.mu.Unlock()
	if start.IsZero() {
		return start
	}
	g := r.metaGrace()
	return start.Add(g + r.drift(g))
}

// freeNode is a counted node that answered that the key is free, at its
// clock's at (ms).
type freeNode struct {
	node int
	at   int64
}

// add notes rep, a counted answer to the extension.
func (w *renewal) add(rep Reply) {
	switch {
	case rep.Err != nil:
	case rep.TTL > 0:
		if w.holders == 0 {
			w.fence, w.attempt, w.mode, w.name = rep.Entry.Fence, rep.Attempt, rep.Entry.Mode, rep.Entry.Name
		}
		w.split = w.split || rep.Entry.Fence != w.fence || rep.Attempt != w.attempt
		w.holders++
	case rep.FreeAt > 0 && time.Now().Before(w.freeBy):
		w.free = append(w.free, freeNode{rep.Tag, rep.FreeAt})
	}
}

// heal takes key again for token on the nodes that lost it, in the
// background: on those that already answered the extension f, and on
// those that answer it later. validEnd is when the validity the holder
// was told ends; ttl the lease the lock keeps, mode the one the extension
// recorded ("" for the holders' own).
func (r *Redlock) heal(key, token string, ttl time.Duration, mode engine.Mode, w *renewal, f *flight, validEnd time.Time) {
	if w.split || w.fence <= 0 || w.holders < r.quorum {
		return
	}
	if mode == "" {
		mode = w.mode
	}
	h := engine.Hold{Token: token, TTL: ttl, Mode: mode, Name: w.name}
	var free []freeNode
	for _, n := range w.free {
		if !w.started.Before(r.healsFrom(n.node)) {
			free = append(free, n)
		}
	}
	if len(free) == 0 && f.landed() {
		return
	}
	r.afterward(f, func(rep Reply) { // the answers that came after the verdict
		if rep.Err == nil && rep.FreeAt > 0 && r.counts(rep, f.epoch) && time.Now().Before(w.freeBy) &&
			!w.started.Before(r.healsFrom(rep.Tag)) {
			free = append(free, freeNode{rep.Tag, rep.FreeAt})
		}
	}, func() {
		if len(free) > 0 {
			r.bg.Go(func() { r.healOn(key, h, w, free, validEnd) })
		}
	})
}

// healOn takes key again for h on the free nodes, within the validity the
// holder was told (validEnd), and waits for their answers.
func (r *Redlock) healOn(key string, h engine.Hold, w *renewal, free []freeNode, validEnd time.Time) {
	ttl := h.TTL
	done := make(Replies, len(free))
	ctx, cancel := context.WithTimeout(r.life, r.timeout(ttl))
	defer cancel()
	sent := 0
	for _, n := range free {
		// The validity left now, not when the node answered: the
		// node's at came before this moment, so at+left is no later
		// than the validity's end by the node's clock, and a node
		// whose clock stepped back since (heal.lua caps the TTL at
		// left) keeps the key past it by the heal's way there only.
		left := time.Until(validEnd)
		if left <= 0 || left > r.markFor() {
			continue
		}
		op := &Op{Kind: OpHeal, Key: key, Hold: h, Fence: w.fence, Attempt: w.attempt,
			FreeAt: n.at, HealUntil: n.at + left.Milliseconds(), MetaFor: r.metaGrace()}
		r.nodes[n.node].Do(ctx, op, n.node, done)
		sent++
	}
	healed := 0
	for range sent {
		rep := <-done
		r.health.note(rep.Tag, rep.Err)
		if rep.Err == nil && rep.TTL > 0 {
			healed++
		}
	}
	r.healed.Add(int64(healed))
}

// Healed is how many times a renewal took a lock again on a node that had
// lost it.
func (r *Redlock) Healed() int64 { return r.healed.Load() }
