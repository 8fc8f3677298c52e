package quorum

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestOpContextCancel(t *testing.T) {
	c := newOpContext(context.Background(), time.Hour)
	if c.Err() != nil {
		t.Fatalf("Err before cancel: %v", c.Err())
	}
	done := c.Done()
	c.cancel()
	<-done
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err after cancel: %v", c.Err())
	}
	c.cancel() // a second cancel is a no-op
}

func TestOpContextCancelBeforeDone(t *testing.T) {
	c := newOpContext(context.Background(), time.Hour)
	c.cancel()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err: %v", c.Err())
	}
	<-c.Done() // closed at once
}

// TestOpContextDeadline: Err and Done report the deadline, whether Done was
// called before it passed or after.
func TestOpContextDeadline(t *testing.T) {
	waited := newOpContext(context.Background(), time.Millisecond)
	<-waited.Done()
	if !errors.Is(waited.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err after Done: %v", waited.Err())
	}
	polled := newOpContext(context.Background(), time.Millisecond)
	for polled.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(polled.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err: %v", polled.Err())
	}
	<-polled.Done()
	if d, ok := polled.Deadline(); !ok || d.IsZero() {
		t.Fatalf("Deadline: %v %v", d, ok)
	}
}

// TestOpContextLife: the end of life (Redlock.Close) ends the context, for
// a caller waiting on Done and for one reading Err.
func TestOpContextLife(t *testing.T) {
	life, stop := context.WithCancel(context.Background())
	waited := newOpContext(life, time.Hour)
	polled := newOpContext(life, time.Hour)
	done := waited.Done()
	stop()
	<-done
	if !errors.Is(waited.Err(), context.Canceled) || !errors.Is(polled.Err(), context.Canceled) {
		t.Fatalf("Err after the end of life: %v, %v", waited.Err(), polled.Err())
	}
	<-polled.Done()
}

// TestOpContextChild: a context derived from it ends with it.
func TestOpContextChild(t *testing.T) {
	c := newOpContext(context.Background(), time.Hour)
	child, cancel := context.WithCancel(c)
	defer cancel()
	c.cancel()
	<-child.Done()
	if !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("child's Err: %v", child.Err())
	}
}
