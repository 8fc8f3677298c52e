package luascript

import (
	"context"
	"sync"
	"time"
)

// fakeLocks is an in-memory Locks for tests that need no Redis. When fail is
// set every call returns it. It records the context error seen by each Del.
type fakeLocks struct {
	mu        sync.Mutex
	locks     map[string]fakeLock
	fail      error
	delCtxErr []error
}

type fakeLock struct {
	token string
	ttl   time.Duration // 0: none
}

var _ Locks = (*fakeLocks)(nil)

func newFakeLocks() *fakeLocks { return &fakeLocks{locks: make(map[string]fakeLock)} }

func (f *fakeLocks) Get(_ context.Context, key string) (string, int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.locks[key]
	switch {
	case f.fail != nil:
		return "", 0, false, f.fail
	case !ok:
		return "", 0, false, nil
	case l.ttl == 0:
		return l.token, -1, true, nil
	}
	return l.token, l.ttl.Milliseconds(), true, nil
}

func (f *fakeLocks) SetNX(_ context.Context, key, token string, ttl time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, held := f.locks[key]; held || f.fail != nil {
		return false, f.fail
	}
	f.locks[key] = fakeLock{token: token, ttl: ttl}
	return true, nil
}

func (f *fakeLocks) PExpire(_ context.Context, key, token string, ttl time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.locks[key]; !ok || l.token != token || f.fail != nil {
		return false, f.fail
	}
	f.locks[key] = fakeLock{token: token, ttl: ttl}
	return true, nil
}

func (f *fakeLocks) Del(ctx context.Context, key, token string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delCtxErr = append(f.delCtxErr, ctx.Err())
	if l, ok := f.locks[key]; !ok || l.token != token || f.fail != nil {
		return false, f.fail
	}
	delete(f.locks, key)
	return true, nil
}

// publishingLocks is a fakeLocks that is also a Publisher.
type publishingLocks struct {
	*fakeLocks
	published [][2]string // channel, message
}

func (p *publishingLocks) Publish(_ context.Context, channel, message string) error {
	p.published = append(p.published, [2]string{channel, message})
	return nil
}
