package luascript

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

func TestCacheSHA1MatchesScriptLoad(t *testing.T) {
	rc := dialRESP(t, redistest.Start(t, redistest.Options{}).Addr())
	c := NewCache(100)
	for name := range libraryScripts {
		src := readLibraryScript(t, name)
		want, err := rc.do("SCRIPT", "LOAD", string(src))
		if err != nil {
			t.Fatal(err)
		}
		sha, s, err := c.Load(src)
		if err != nil || sha != want.Str || SHA1(src) != want.Str || s.Name != libraryScripts[name] {
			t.Errorf("%s: Load = %s, %v, %v; SCRIPT LOAD = %s", name, sha, s, err, want.Str)
		}
		if got, ok := c.Get(sha); !ok || got != s {
			t.Errorf("%s: Get(%s) = %v, %v", name, sha, got, ok)
		}
	}
}

// loadN loads the first n testdata scripts, returning their SHA1s in order.
func loadN(t *testing.T, c *Cache, n int) []string {
	t.Helper()
	var shas []string
	for _, s := range Catalog()[:n] {
		src, err := sources.ReadFile("scripts/" + s.file)
		if err != nil {
			t.Fatal(err)
		}
		sha, _, err := c.Load(src)
		if err != nil {
			t.Fatal(err)
		}
		shas = append(shas, sha)
	}
	return shas
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := NewCache(2)
	shas := loadN(t, c, 2)
	c.Get(shas[0]) // the second is now the least recently used
	src, _ := sources.ReadFile("scripts/" + Catalog()[2].file)
	third, _, err := c.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Exists(shas[0]) || c.Exists(shas[1]) || !c.Exists(third) {
		t.Errorf("after a third load: exists %v %v %v, want true false true",
			c.Exists(shas[0]), c.Exists(shas[1]), c.Exists(third))
	}
	if c := NewCache(0); len(loadN(t, c, 2)) != 2 || c.Exists(SHA1(nil)) {
		t.Error("NewCache(0) misbehaves")
	}
}

func TestCacheGetIgnoresCase(t *testing.T) {
	c := NewCache(10)
	sha := loadN(t, c, 1)[0]
	for _, s := range []string{sha, strings.ToUpper(sha), strings.ToUpper(sha[:7]) + sha[7:]} {
		if _, ok := c.Get(s); !ok {
			t.Errorf("Get(%s) missed", s)
		}
	}
	if c.Exists(sha[:39]) || c.Exists(sha+"0") {
		t.Error("Exists matched a wrong SHA1")
	}
}

func TestCacheFlush(t *testing.T) {
	c := NewCache(10)
	shas := loadN(t, c, 3)
	c.Flush()
	for _, sha := range shas {
		if c.Exists(sha) {
			t.Errorf("%s survived Flush", sha)
		}
	}
	if len(loadN(t, c, 3)) != 3 || !c.Exists(shas[2]) {
		t.Error("Load after Flush failed")
	}
}

func TestCacheDoesNotStoreUnknown(t *testing.T) {
	c := NewCache(10)
	src := []byte("return redis.call('flushall')")
	sha, s, err := c.Load(src)
	var unknown *UnknownError
	if sha != SHA1(src) || s != nil || !errors.As(err, &unknown) || c.Exists(sha) {
		t.Errorf("Load(unknown) = %s, %v, %v; exists %v", sha, s, err, c.Exists(sha))
	}
}

func TestCacheConcurrent(t *testing.T) {
	c := NewCache(5)
	srcs := make([][]byte, 0, len(catalog))
	for _, s := range catalog {
		src, _ := sources.ReadFile("scripts/" + s.file)
		srcs = append(srcs, src)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				src := srcs[(g+i)%len(srcs)]
				if _, _, err := c.Load(src); err != nil {
					t.Error(err)
					return
				}
				c.Get(SHA1(src))
				if i%50 == 0 {
					c.Flush()
				}
			}
		}()
	}
	wg.Wait()
	if n := len(c.byKey); n > 5 || n != c.lru.Len() {
		t.Errorf("cache holds %d scripts, %d in order; max 5", n, c.lru.Len())
	}
}

// TestCacheBoundedByDistinctScripts: 10,000 distinct admitted scripts
// leave the cache at its bound, holding the most recent ones.
func TestCacheBoundedByDistinctScripts(t *testing.T) {
	c := NewCache(100)
	var last string
	for i := range 10000 {
		src := []byte("return redis.call('GET', KEYS[1]) .. '" + strconv.Itoa(i) + "'")
		sha, e, err := c.Resolve(src)
		if err != nil || e.Admitted == nil || sha != SHA1(src) {
			t.Fatalf("Resolve %d: %v %v", i, e, err)
		}
		last = sha
	}
	if c.Len() != 100 || len(c.byKey) != 100 || !c.Exists(last) {
		t.Fatalf("cache holds %d (%d), last exists %v; want 100", c.Len(), len(c.byKey), c.Exists(last))
	}
	if _, e, err := c.Resolve([]byte("return redis.call('FLUSHALL')")); err == nil || e != (Entry{}) || c.Len() != 100 {
		t.Fatalf("a refused script: %v %v, len %d", e, err, c.Len())
	}
}
