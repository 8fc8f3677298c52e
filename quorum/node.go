package quorum

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/luascript"
)

// Claim is one node's answer to an acquire.
type Claim struct {
	// State says whether the node now holds the lock for the token.
	State ClaimState
	// Counter is the node's fencing counter for the key after the acquire
	// (raised by one when State is Acquired). A node may keep one counter
	// for all its keys, as upstream does: it only has to be at least every
	// fence the node recorded or committed for the key.
	Counter int64
	// Fence is the fence recorded for the token on this node: the raised
	// counter when Acquired, the fence of the earlier grant when Mine.
	Fence int64
	// Held is, when Taken, how long the other holder's lease still runs on
	// this node.
	Held time.Duration
}

// ClaimState is the outcome of an acquire on one node.
type ClaimState int

const (
	Taken    ClaimState = iota // another token holds the key on this node
	Acquired                   // the key was free and is now held by the token
	Mine                       // the token already held the key; its TTL was reset
)

// Entry is what one node stores for a held key.
type Entry struct {
	Token string
	Fence int64
	Mode  engine.Mode
	Name  string
	TTL   time.Duration // remaining time to live on the node
	// Type is the key's TYPE when it holds something other than a string
	// (a value lockproxy did not write: its Token is ""); "" for a string.
	Type string
}

// OpKind names a node operation.
type OpKind uint8

const (
	// OpAcquire sets Key to Hold.Token with TTL Hold.TTL if the key is free,
	// raising the node's fencing counter for the key by one and recording the new value
	// as the lock's fence, or resets the TTL if Hold.Token already holds it;
	// all in one atomic step, and nothing if Attempt was undone (see
	// Op.Undo). Reply: Claim.
	OpAcquire OpKind = iota
	// OpCommit raises the node's fencing counter for the key to at least Fence, and
	// records Fence for Token if Token holds the key: exactly where
	// Attempt was the last to take or refresh the hold, else only raising
	// the fence recorded. Redlock names no Attempt: it only raises (commit
	// says why). Reply: OK (held).
	OpCommit
	// OpExtend resets the TTL of Key to TTL if Token holds it — a zero TTL
	// reuses the TTL the key was last given — and records Mode unless it is
	// empty. Reply: TTL applied, 0 if Token does not hold the key, negative
	// if Mode is Bound and the lock is a lease; where it applied one, the
	// hold as the node records it (Entry's Fence, Mode and Name, and
	// Attempt); where the key is free, FreeAt.
	OpExtend
	// OpRelease deletes Key if Token holds it, and unless Rollback, takes
	// Token's place out of the key's line. Reply: OK (released).
	OpRelease
	// OpInspect reads the entry of Key. Reply: Entry, OK (held).
	OpInspect
	// OpLeave takes the waiter named Token out of Key's line and announces
	// it. Reply: OK (it was in line).
	OpLeave
	// OpStatus reads what the node says of its own process and data (see
	// Status), without changing anything. Reply: Status.
	OpStatus
	// OpFloor raises every fencing counter of the node to at least Fence
	// (upstream: its one counter), and records Token (the node's run id)
	// as the process whose counters were raised, and with it the node's
	// largest counter after the raise (Status.Floor), unless it records
	// one for that process already (its first raise stays), or the
	// process was vetted already without one (by a build before the
	// record: none is known). Without a floor (RestartedMark) the record
	// stays as it is. Reply: OK, and the counter recorded for the process
	// as Claim.Counter (0 for none).
	OpFloor
	// OpEval runs Script, a script outside the catalog, with Keys and Args
	// on the node, atomically there (EVALSHA, EVAL when the node does not
	// have it). Reply: Value — an error the script raised is a Value of
	// kind Error, not Err, which is kept for the node's own failures.
	OpEval
	// OpKill sends SCRIPT KILL to the node on a connection of its own,
	// outside the pipeline a running script holds up (see Redlock.Eval).
	// Reply: OK (a script was killed).
	OpKill
	// OpTurn takes the turn on Keys for Token (quorum/turn.go): on the
	// node, every key's turn becomes Token's for TTL, or none does
	// because another token holds one. Reply: OK (taken).
	OpTurn
	// OpTurnBack gives back the turn on Keys: each key's turn that Token
	// still holds is deleted. Reply: none but Err.
	OpTurnBack
	// OpRepair sets each of Keys to the state at the same place in Fix
	// (RESTORE ... REPLACE with its DUMP and remaining time, or DEL when
	// it has no key), only while every key's turn holds Turn, all in one
	// atomic step (repair.go). Reply: none but Err; a turn that is not
	// Turn's is a failure that wraps ErrTurnLost.
	OpRepair
	// OpHeal takes Key again for Hold.Token, with Fence, Attempt and
	// Hold's Mode, Name and TTL (the lease recorded), where the key is free
	// (nothing of any type there): the renewal of a lock a majority holds
	// heals a node that lost it (see Redlock.Extend). It raises the key's
	// fencing counter to at least Fence, gives the key the TTL left until
	// HealUntil, and takes nothing once that is past or if a release of
	// the key found it free or another's on the node since FreeAt (both on
	// the node's clock, from its OpExtend reply; the release's mark is
	// above FreeAt even where the clock stepped back: OpExtend.MarkFor).
	// The TTL given is never more than HealUntil − FreeAt. Reply: TTL
	// given, 0 if it took nothing.
	OpHeal
)

// UndoGrace is how much longer than the attempt's lease an undo mark
// (Op.Undo) is kept: an acquire that reaches a node later than that after
// the release that marked it undone (a link that held it back, or a node
// paused with it unread, for more than the lease and a minute) can take
// the key on that node for one lease. It is the time a release is carried
// to a silent node (carryFor): the node is expected to have answered by
// then.
const UndoGrace = carryFor

// Status is what a node says of itself: enough to tell that it restarted
// and whether a restart can have lost what it held.
type Status struct {
	// RunID names the node's process; it changes on every restart.
	RunID string
	// Uptime is how long the process has run, in whole seconds (rounded
	// down).
	Uptime time.Duration
	// Durable is true when the node is verified to write every change to
	// disk before it answers (appendonly yes, appendfsync always), so that
	// a restart loses nothing. False when it is not, or cannot be read.
	Durable bool
	// Vetted is the run id recorded by the last OpFloor ("" for none): the
	// process whose fencing counters were raised.
	Vetted string
	// FenceMax is the largest fencing counter the node holds, over every
	// key.
	FenceMax int64
	// Floor is the node's largest counter right after the first OpFloor
	// for this very process (RunID), as the node records it: every hold
	// the process took before that OpFloor has a fence up to it. 0 when
	// the node records none for this process (never raised, raised first
	// by a build that did not record it, raised for an earlier process,
	// or a record that cannot be read).
	Floor int64
	// Recorded is the counter of the node's record whichever process it
	// names (Floor's, or an earlier process's); 0 for none. A node
	// verified durable that restarted kept every hold the process before
	// it had, those from before that process's floor too: every hold
	// granted since is above it (the node kept its counter).
	Recorded int64
}

// Op is one operation, sent alike to every node of a fan-out. Nodes must
// not modify it.
type Op struct {
	Kind  OpKind
	Key   string
	Hold  engine.Hold // OpAcquire; OpHeal's Token, Mode, Name and TTL
	Token string      // OpCommit, OpExtend, OpRelease; the waiter, for OpLeave; the run id, for OpFloor
	// Rollback marks an OpRelease that undoes a failed acquire: the token
	// keeps its place in the key's line, and only a hold that Attempt took
	// is deleted (see Attempt). A release by the holder gives up the
	// token's place on every node.
	Rollback bool
	// Attempt names one acquire on every node. The lock records the last
	// attempt that took or refreshed it, and whether that attempt took it
	// with nobody refreshing or extending (OpExtend) it since.
	// On an OpRelease it binds the release to that attempt: only a hold
	// Attempt was the last to land on is deleted, and for a Rollback only
	// one Attempt took and nobody extended since (a RENEW that counted it
	// toward its majority keeps it; a refused retry that refreshed a hold, or an
	// earlier attempt landing late on a later grant's hold, removes
	// nothing; nor does a fresh acquire's rollback remove a hold the same
	// token had before). On an OpExtend it extends only a hold Attempt was
	// the last to land on (a lock-delay set on close must not touch a
	// later grant). On an OpCommit it lets the fence recorded for the hold
	// be set lower (see OpCommit). Empty: any hold of Token.
	Attempt string
	// Undo is, for an OpRelease, an acquire attempt that may not have landed
	// on the node yet (its call timed out, or is still in flight): unless
	// the node shows it landed, the release marks it undone for UndoFor
	// (the attempt's lease) plus UndoGrace, and the attempt takes nothing
	// if it lands later. This keeps a late acquire from outliving the
	// release, whatever the order in which the node runs the two (a call on
	// a dropped connection may run after a later one).
	Undo    string
	UndoFor time.Duration
	// Line is, for an OpRelease, the releasing instance's first waiters for
	// Key (at most two: the head, which that instance wakes itself, and the
	// one its grants put in line after it, which follows the head there): a
	// node need not announce the release when nobody else is in line.
	Line  []engine.Waiter
	Fence int64 // OpCommit, OpFloor, OpHeal
	// FreeAt and HealUntil are OpHeal's clock readings (ms of the node's
	// clock): when the node's OpExtend found the key free, and FreeAt
	// plus the validity the holder was told has left when the heal is
	// sent (no later than the node's clock when that validity ends).
	FreeAt, HealUntil int64
	// MarkFor is, for an OpRelease that is not a Rollback, how long a node
	// where the token does not hold the key marks it released, so that a
	// heal that found it free before (OpHeal) takes nothing; for an
	// OpExtend, how long a node where the key is free marks the moment it
	// found it so (FreeAt), which every later mark exceeds whatever the
	// node's clock does; zero: no mark.
	MarkFor time.Duration
	// MetaFor is, for an OpAcquire, OpCommit, OpExtend and OpHeal that
	// writes the lock's meta, how much longer than the key the meta is
	// kept (Redlock.metaGrace): a release deletes only the key, and an
	// OpExtend that finds the key free beside a meta (any token's) answers
	// that it is not held, with no FreeAt, so that no heal is decided from
	// a node where a hold was released. For an OpRelease, how long a meta
	// that describes nobody is left where the hold it deletes had none (a
	// client's script or a repair took the key). Zero: the meta ends with
	// the key, and a release leaves none.
	MetaFor time.Duration
	TTL     time.Duration // OpExtend
	Mode    engine.Mode   // OpExtend
	// Script, Keys and Args are OpEval's script and its KEYS and ARGV;
	// Keys are also the keys of OpTurn and OpTurnBack.
	Script     *luascript.Admitted
	Keys, Args []string
	// Turn is, for an OpEval, the token of the turn taken on Keys
	// (quorum/turn.go): the node runs the script only while every key's
	// turn holds it, and otherwise answers with a failure that wraps
	// ErrTurnLost. Empty: the script runs unguarded.
	Turn string
	turn *turn // the Redlock's side of Turn
	// State asks, for an OpEval guarded by its turn, for the state each
	// key of Keys (uniqueKeys order) is left in on the node, in the same
	// atomic step as the script: Reply.States (repair.go).
	State bool
	// Fix is, for an OpRepair, the state to give each key of Keys.
	Fix []KeyState
}

// Reply is one node's answer to an Op.
type Reply struct {
	Tag    int // the tag the caller gave Do
	Claim  Claim
	OK     bool
	TTL    time.Duration
	Entry  Entry
	Status Status          // OpStatus
	Value  luascript.Reply // OpEval
	// States is, for an OpEval with State, each key's state on the node
	// right after the script, in the order of the op's unique keys; nil
	// when the script raised an error (the node's state is then unknown).
	States []KeyState
	// Attempt is, for an OpRelease that deleted a hold (OK), the attempt
	// that last took or refreshed it there ("" if the node did not record
	// one): a release carried on to silent nodes is bound to it. For an
	// OpExtend that applied a TTL, the attempt the hold records.
	Attempt string
	// FreeAt is, for an OpExtend, the node's clock (ms) when it found the
	// key free (nothing of any type there, and no meta left by a hold
	// released there: Op.MetaFor); 0 otherwise.
	FreeAt int64
	// Incarnation is the run id of the node process that answered, when
	// the node knows it ("" otherwise). The restart rule counts an answer
	// only from the process it has vetted.
	Incarnation string
	Err         error
}

// Sink takes a node's replies. Put never blocks, and it is called by
// whichever goroutine has the reply (a node's reader): it must be quick.
type Sink interface{ Put(Reply) }

// Replies is a Sink over a channel with room for every reply put to it.
type Replies chan Reply

// Put sends r on the channel.
func (c Replies) Put(r Reply) { c <- r }

// Node is one independent Redis node as the Redlock algorithm sees it.
// Every operation is atomic on the node (a Lua script).
type Node interface {
	// Do starts op on the node without waiting for it and puts exactly
	// one Reply, carrying tag, to done. The reply comes once the node
	// answered, or with an error once ctx is done or the node failed; a
	// call whose ctx ends before it was sent is not sent.
	Do(ctx context.Context, op *Op, tag int, done Sink)
	// String names the node (its address) in errors.
	String() string
}
