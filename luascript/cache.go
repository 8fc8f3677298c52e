package luascript

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
)

// SHA1 is the name Redis gives a script: the lower-case hex SHA1 of its
// exact bytes.
func SHA1(src []byte) string {
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

// Cache is the SCRIPT cache: SHA1 -> recognised script. It is safe for
// concurrent use and holds at most max scripts; when full, the oldest loaded
// one goes.
type Cache struct {
	mu    sync.Mutex
	max   int
	byKey map[string]*Script
	order []string // SHA1s, oldest first
}

// NewCache returns an empty cache holding at most max scripts (at least 1).
func NewCache(max int) *Cache {
	if max < 1 {
		max = 1
	}
	return &Cache{max: max, byKey: make(map[string]*Script)}
}

// Load recognises src and stores it under its SHA1, which it returns even
// when src is not recognised; an unrecognised script is not stored and err
// is an *UnknownError. Loading a stored script again keeps its age.
func (c *Cache) Load(src []byte) (sha string, s *Script, err error) {
	sha = SHA1(src)
	if s, ok := c.Get(sha); ok {
		return sha, s, nil // the same bytes: no need to recognise them again
	}
	if s, err = Recognize(src); err != nil {
		return sha, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[sha]; ok {
		return sha, s, nil
	}
	if len(c.order) >= c.max {
		delete(c.byKey, c.order[0])
		c.order = c.order[1:]
	}
	c.byKey[sha] = s
	c.order = append(c.order, sha)
	return sha, s, nil
}

// Get returns the script stored under sha, compared case-insensitively as
// Redis does.
func (c *Cache) Get(sha string) (*Script, bool) {
	sha = strings.ToLower(sha)
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.byKey[sha]
	return s, ok
}

// Exists reports whether a script is stored under sha (SCRIPT EXISTS).
func (c *Cache) Exists(sha string) bool {
	_, ok := c.Get(sha)
	return ok
}

// Flush empties the cache (SCRIPT FLUSH).
func (c *Cache) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byKey = make(map[string]*Script)
	c.order = nil
}
