package zookeeper

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockproxy/lockproxy/engine"
)

// seenNode is lock node p at version mzxid, with a lease of ttl.
func seenNode(p string, mzxid int64, ttl time.Duration) lockNode {
	return lockNode{path: p, data: zkData{Token: "t", Mode: engine.Lease, TTL: millis(ttl)}, stat: &zk.Stat{Mzxid: mzxid}}
}

// TestSightingCountsFromFirstRead: a version read again keeps the moment
// it was first read; a new version (a renewal) counts afresh; the count
// is the lease plus the drift allowance.
func TestSightingCountsFromFirstRead(t *testing.T) {
	z := &ZooKeeper{own: map[string]*ownNode{}, seen: map[string]sighting{}}
	first := z.sightLocked(seenNode("/k/a", 7, time.Minute))
	if again := z.sightLocked(seenNode("/k/a", 7, time.Minute)); again.since != first.since {
		t.Fatalf("the same version counted afresh: %v then %v", first.since, again.since)
	}
	if got, want := first.end().Sub(first.since), time.Minute+600*time.Millisecond+2*time.Millisecond; got != want {
		t.Fatalf("end %v after the first read, want %v", got, want)
	}
	if renewed := z.sightLocked(seenNode("/k/a", 8, time.Minute)); renewed.since.Before(first.since) || renewed.mzxid != 8 {
		t.Fatalf("a new version kept the old count: %+v", renewed)
	}
}

// TestSightingsBounded: past maxSeen, the sightings whose end has passed
// go, and the live ones stay; when all are live, all go (a version
// forgotten counts again from its next read: later, never earlier).
func TestSightingsBounded(t *testing.T) {
	z := &ZooKeeper{own: map[string]*ownNode{}, seen: map[string]sighting{}}
	long := time.Now().Add(-time.Hour)
	for i := range maxSeen - 1 {
		z.seen[fmt.Sprint("/k/old", i)] = sighting{mzxid: 1, since: long, ttl: time.Second}
	}
	z.seen["/k/live"] = sighting{mzxid: 1, since: time.Now(), ttl: time.Minute}
	z.sightLocked(seenNode("/k/new", 2, time.Minute))
	if _, ok := z.seen["/k/live"]; !ok || len(z.seen) != 2 {
		t.Fatalf("after pruning: %d sightings, live kept %v; want the live one and the new one", len(z.seen), ok)
	}
	for i := range maxSeen {
		z.seen[fmt.Sprint("/k/live", i)] = sighting{mzxid: 1, since: time.Now(), ttl: time.Minute}
	}
	z.sightLocked(seenNode("/k/newer", 3, time.Minute))
	if len(z.seen) != 1 {
		t.Fatalf("%d sightings remembered past the bound, want only the newest", len(z.seen))
	}
}
