package zookeeper

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/engine"
)

// zkData is the JSON a lock node holds.
type zkData struct {
	Token string      `json:"token"`
	Mode  engine.Mode `json:"mode,omitempty"`   // empty: a waiter's place, not a lock yet
	TTL   int64       `json:"ttl_ms,omitempty"` // the lease, in ms
	// ExpiresAt is the lease's end in unix ms on the wall clock of the
	// instance By, which wrote it. It is for people reading the node, and
	// for instances older than issue 30: no instance judges a lease by it
	// (expiry.go).
	ExpiresAt int64  `json:"expires_at,omitempty"`
	Name      string `json:"name,omitempty"` // the holder's client name
	// By names the instance (ZooKeeper.id) that wrote this version.
	By string `json:"by,omitempty"`
	// Fence is the lock's fence when its node is not the one it was
	// granted in: a node promoted to a lease (promoted) keeps the fence,
	// the creation zxid, of the node it replaced.
	Fence int64 `json:"fence,omitempty"`
	// at is when this instance made the data (lasts), on its monotonic
	// clock; zero in data read from a node.
	at time.Time
	// Parked marks a lease that was a connection-bound lock, which an
	// instance closing its session made a lease (park) so that it
	// outlives the session: the watchdog's renewal of its holder, through
	// another instance, makes it bound again (extended).
	Parked bool `json:"parked,omitempty"`
}

// fence is the fence of lock node n: its creation zxid, or the one its
// data carries over from the node it replaced.
func (n lockNode) fence() int64 {
	if n.data.Fence != 0 {
		return n.data.Fence
	}
	return n.stat.Czxid
}

func (d zkData) waiting() bool { return d.Mode == "" }

func (d zkData) heldBy(token string) bool { return !d.waiting() && d.Token == token }

func (d zkData) ttl() time.Duration { return time.Duration(d.TTL) * time.Millisecond }

func (d zkData) expiry() time.Time { return time.UnixMilli(d.ExpiresAt) }

// leftHere is what is left of lease d, made through this instance
// (lasts), by its monotonic clock.
func (d zkData) leftHere() time.Duration { return time.Until(d.at.Add(d.ttl())) }

func (d zkData) encode() []byte { b, _ := json.Marshal(d); return b }

// lasts is d with a lease of ttl from now: from this instance's
// monotonic clock's now (at), and wall, its wall clock's, for expires_at.
func (d zkData) lasts(wall time.Time, ttl time.Duration) zkData {
	d.TTL, d.ExpiresAt, d.at = millis(ttl), wall.Add(ttl).UnixMilli(), time.Now()
	return d
}

// lockNode is a lock node as read: its path, data and stat.
type lockNode struct {
	path string
	data zkData
	stat *zk.Stat
}

// view is a key's lock nodes, lowest first, and the lowest one's content.
type view struct {
	kids []child
	top  lockNode // valid when kids is not empty
}

// held reports whether some token holds the key: the lowest node is a
// lock, not a waiter's place that has not taken it yet.
func (v view) held() bool { return len(v.kids) > 0 && !v.top.data.waiting() }

// errNotEncodedKey means a path segment is not the encoding of a lock key.
var errNotEncodedKey = errors.New("zookeeper: not an encoded lock key")

const upperHex = "0123456789ABCDEF"

// encodeKey turns a lock key — any bytes — into one ZooKeeper path segment:
// ASCII letters, digits, '_' and '-' stay as they are, and every other byte
// (including '%', '.', '/', control and non-ASCII bytes) becomes %XX in
// upper-case hex. The segment holds no '/' and no '.', so it is never "."
// or "..", and only printable ASCII, which ZooKeeper accepts in a path. It
// is up to three times as long as the key. decodeKey reverses it.
func encodeKey(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keptByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0x0f])
	}
	return b.String()
}

// keptByte reports whether encodeKey keeps c as it is.
func keptByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// decodeKey is the key that encodeKey turned into seg. It accepts only what
// encodeKey writes (upper-case hex, no escaped byte that could stay as it
// is), so every key has exactly one encoding.
func decodeKey(seg string) (string, error) {
	if seg == "" {
		return "", errNotEncodedKey
	}
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if keptByte(c) {
			b.WriteByte(c)
			continue
		}
		if c != '%' || i+2 >= len(seg) {
			return "", errNotEncodedKey
		}
		hi, lo := strings.IndexByte(upperHex, seg[i+1]), strings.IndexByte(upperHex, seg[i+2])
		if hi < 0 || lo < 0 || keptByte(byte(hi<<4|lo)) {
			return "", errNotEncodedKey
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}

// seqDigits is the width of the sequence number ZooKeeper appends to the
// name of a sequential node.
const seqDigits = 10

// Kinds of lock node: the letter after the token id in a node's name.
const (
	kindTry   = 't' // an acquire that tries once, and the lock it may become
	kindPlace = 'w' // a waiter's place in line, and the lock it may become
	// kindLease is a lease that replaced an ephemeral node — a waiter's
	// place, or a connection-bound lock — when its lock became a lease
	// (promoted): persistent, with the replaced node's sequence, so it
	// keeps that node's place in line.
	kindLease = 'l'
	// kindBound is a connection-bound lock that replaced a lease, or a
	// bound lock of another session, when the same token took it bound
	// through this session (converted): ephemeral, this session's, with
	// the replaced node's sequence.
	kindBound = 'b'
)

// tokenIDLen is the length of tokenID's hex digits.
const tokenIDLen = 16

// promoted is the path of the persistent node that replaces lock node or
// place p when it becomes a lease: p's name with kind kindLease. A
// sequential node is never given that name: ZooKeeper numbers a parent's
// children by its count of child changes, which only grows, and the
// container is only deleted once empty.
func promoted(p string) string { return converted(p, kindLease) }

// converted is the path of the node that replaces lock node p when its
// mode changes: p's name with kind, kindLease or kindBound, so at p's
// sequence. It may be p itself: a bound lock of another session taken
// again through this one is deleted and made again under its own name,
// in one multi.
func converted(p string, kind byte) string {
	dir, name := path.Split(p)
	if len(name) <= tokenIDLen+1 {
		return p
	}
	return dir + name[:tokenIDLen+1] + string(kind) + name[tokenIDLen+2:]
}

// tokenID names a token's nodes: 16 hex digits of its SHA-256. A node is
// found by name without reading every child's data, and the token, a
// secret, never appears in a path.
func tokenID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// nodePrefix is a lock node's name before ZooKeeper's sequence number:
// "<tokenID>-<kind><nonce>-". The nonce, 8 hex digits fresh for each create,
// lets a create whose outcome is unknown find its node, and only its node.
func nodePrefix(token string, kind byte) string {
	var nonce [4]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails (Go 1.24+)
	return tokenID(token) + "-" + string(kind) + hex.EncodeToString(nonce[:]) + "-"
}

// placePrefix starts the names of the places of the waiter named id.
func placePrefix(id string) string { return tokenID(id) + "-" + string(kindPlace) }

// child is a lock node of a key: its name and sequence number.
type child struct {
	name string
	seq  int64
}

// parseChildren keeps the names that end in a sequence number, lowest
// first. The lowest holds the lock.
func parseChildren(names []string) []child {
	kids := make([]child, 0, len(names))
	for _, name := range names {
		if len(name) <= seqDigits {
			continue
		}
		seq, err := strconv.ParseInt(name[len(name)-seqDigits:], 10, 64)
		if err == nil {
			kids = append(kids, child{name: name, seq: seq})
		}
	}
	slices.SortFunc(kids, func(a, b child) int { return cmp.Compare(a.seq, b.seq) })
	return kids
}

// indexOf is the position of the child named name in kids, or -1.
func indexOf(kids []child, name string) int {
	return slices.IndexFunc(kids, func(c child) bool { return c.name == name })
}

// firstWithPrefix is the position of the lowest child whose name starts
// with prefix, or -1.
func firstWithPrefix(kids []child, prefix string) int {
	return slices.IndexFunc(kids, func(c child) bool { return strings.HasPrefix(c.name, prefix) })
}
