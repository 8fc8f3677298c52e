package luascript

import (
	"container/list"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
)

// SHA1 is the name Redis gives a script: the lower-case hex SHA1 of its
// exact bytes.
func SHA1(src []byte) string {
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

// Entry is a script in the cache: a catalogued one (Known), which runs as
// lock operations, or one the admission check let through (Admitted),
// which runs unchanged on every node. Exactly one is set.
type Entry struct {
	Known    *Script
	Admitted *Admitted
}

// Cache is the SCRIPT cache: SHA1 -> catalogued or admitted script. It is
// safe for concurrent use and holds at most max scripts; when full, the
// least recently used one goes (loaded, or looked up by EVALSHA).
type Cache struct {
	mu    sync.Mutex
	max   int
	byKey map[string]*list.Element // of cached
	lru   list.List                // most recently used first
}

type cached struct {
	sha string
	e   Entry
}

// NewCache returns an empty cache holding at most max scripts (at least 1).
func NewCache(max int) *Cache {
	if max < 1 {
		max = 1
	}
	return &Cache{max: max, byKey: make(map[string]*list.Element)}
}

// Load recognises src and stores it under its SHA1, which it returns even
// when src is not recognised; an unrecognised script is not stored and err
// is an *UnknownError. It stores only catalogued scripts (see Resolve).
func (c *Cache) Load(src []byte) (sha string, s *Script, err error) {
	sha = SHA1(src)
	if e, ok := c.Lookup(sha); ok && e.Known != nil {
		return sha, e.Known, nil // the same bytes: no need to recognise them again
	}
	if s, err = Recognize(src); err != nil {
		return sha, nil, err
	}
	c.put(sha, Entry{Known: s})
	return sha, s, nil
}

// Resolve stores src under its SHA1, which it returns in any case: as the
// catalogued script it is, or else as a script the admission check lets
// through. A script that is neither is not stored and err is the
// check's *AdmitError.
func (c *Cache) Resolve(src []byte) (sha string, e Entry, err error) {
	sha = SHA1(src)
	if e, ok := c.Lookup(sha); ok {
		return sha, e, nil
	}
	s, err := Recognize(src)
	var unknown *UnknownError
	switch {
	case err == nil:
		e.Known = s
	case errors.As(err, &unknown):
		if e.Admitted, err = Admit(src); err != nil {
			return sha, Entry{}, err
		}
	default:
		return sha, Entry{}, err
	}
	c.put(sha, e)
	return sha, e, nil
}

// put stores e under sha as the most recently used, evicting the least
// recently used script when the cache is full.
func (c *Cache) put(sha string, e Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[sha]; ok {
		c.lru.MoveToFront(el)
		return
	}
	if c.lru.Len() >= c.max {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.byKey, oldest.Value.(*cached).sha)
	}
	c.byKey[sha] = c.lru.PushFront(&cached{sha: sha, e: e})
}

// Lookup returns the script stored under sha, compared case-insensitively
// as Redis does, and marks it used.
func (c *Cache) Lookup(sha string) (Entry, bool) {
	sha = strings.ToLower(sha)
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[sha]
	if !ok {
		return Entry{}, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cached).e, true
}

// Get returns the catalogued script stored under sha.
func (c *Cache) Get(sha string) (*Script, bool) {
	e, ok := c.Lookup(sha)
	return e.Known, ok && e.Known != nil
}

// Exists reports whether a script is stored under sha (SCRIPT EXISTS). It
// does not mark it used.
func (c *Cache) Exists(sha string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.byKey[strings.ToLower(sha)]
	return ok
}

// Len is the number of scripts stored.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Flush empties the cache (SCRIPT FLUSH).
func (c *Cache) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byKey = make(map[string]*list.Element)
	c.lru.Init()
}
