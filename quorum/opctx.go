package quorum

import (
	"context"
	"sync"
	"time"
)

// opContext is the context a fan-out's node calls share: done at its
// deadline, when Redlock.Close ends life, or on cancel. Unlike
// context.WithTimeout(life, ...) it starts no timer and registers nothing
// with life until a caller waits on Done: the node pipelines only read its
// Deadline and Err, and an operation's calls usually land long before the
// deadline, so most operations never pay for a timer and never take
// life's lock (which every concurrent operation shared).
type opContext struct {
	life     context.Context
	deadline time.Time

	mu       sync.Mutex
	err      error
	done     chan struct{} // made by the first Done
	stopTime func() bool   // the deadline's timer, once Done was called
	stopLife func() bool   // the watch of life, once Done was called
}

func newOpContext(life context.Context, timeout time.Duration) *opContext {
	return &opContext{life: life, deadline: time.Now().Add(timeout)}
}

func (c *opContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *opContext) Value(key any) any { return c.life.Value(key) }

// Err is Canceled once cancel ran or life ended, DeadlineExceeded once the
// deadline passed. While a Done channel waits on a timer, Err follows the
// channel, as a standard context's does.
func (c *opContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && c.done == nil {
		c.err = c.check()
	}
	return c.err
}

// check is the error the context has ended with, judged now.
func (c *opContext) check() error {
	if err := c.life.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Done starts, on its first call, the timer and the watch of life that
// close the channel it returns.
func (c *opContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = make(chan struct{})
	if c.err == nil {
		c.err = c.check()
	}
	if c.err != nil {
		close(c.done)
		return c.done
	}
	t := time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
	c.stopTime = t.Stop
	c.stopLife = context.AfterFunc(c.life, func() { c.end(c.life.Err()) })
	return c.done
}

// cancel ends the context, as a CancelFunc does.
func (c *opContext) cancel() { c.end(context.Canceled) }

// end records err unless the context ended already, closes Done's channel
// and stops what would close it.
func (c *opContext) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil && c.done == nil {
		return // ended before anyone waited: nothing to close or stop
	}
	if c.done != nil {
		select {
		case <-c.done:
			return
		default:
		}
		close(c.done)
		c.stopTime()
		c.stopLife()
	}
	if c.err == nil {
		c.err = err
	}
}
