package main

import (
	"testing"
	"time"
)

// at is t0 plus ms milliseconds.
var t0 = time.Now()

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		grants []grant
		writes []write
		want   verdict
	}{
		{
			name: "clean: one after the other, fences rising, writes in order",
			grants: []grant{
				{Key: "k", Token: "a", Fence: 1, Recv: at(0), End: at(100)},
				{Key: "k", Token: "b", Fence: 2, Recv: at(100), End: at(200)},
				{Key: "j", Token: "c", Fence: 1, Recv: at(50), End: at(150)}, // another key
			},
			writes: []write{
				{Key: "k", Token: "a", Fence: 1, At: at(10), Accepted: true},
				{Key: "k", Token: "b", Fence: 2, At: at(110), Accepted: true},
			},
		},
		{
			name: "overlap: b granted while a still held",
			grants: []grant{
				{Key: "k", Token: "a", Fence: 1, Recv: at(0), End: at(100)},
				{Key: "k", Token: "b", Fence: 2, Recv: at(99), End: at(200)},
			},
			want: verdict{DoubleGrants: 1},
		},
		{
			name: "legacy grants overlap too, without fences",
			grants: []grant{
				{Key: "k", Token: "a", Recv: at(0), End: at(100)},
				{Key: "k", Token: "b", Recv: at(50), End: at(200)},
			},
			want: verdict{DoubleGrants: 1},
		},
		{
			name: "a grant that arrived expired was never held",
			grants: []grant{
				{Key: "k", Token: "a", Fence: 5, Recv: at(100), End: at(90)},
				{Key: "k", Token: "b", Fence: 4, Recv: at(95), End: at(200)},
			},
		},
		{
			name: "fence goes back after a node restarted empty: the regression, and the stale write",
			grants: []grant{
				{Key: "k", Token: "a", Fence: 103, Recv: at(0), End: at(100)},
				{Key: "k", Token: "b", Fence: 3, Recv: at(150), End: at(250)},
				{Key: "k", Token: "c", Fence: 4, Recv: at(300), End: at(400)},
			},
			writes: []write{
				{Key: "k", Token: "a", Fence: 103, At: at(10), Accepted: true},
				{Key: "k", Token: "b", Fence: 3, At: at(160), Accepted: false},
				{Key: "k", Token: "c", Fence: 4, At: at(310), Accepted: true}, // as if the register had lost its state
			},
			want: verdict{FenceRegressed: 2, StaleWrites: 1, RefusedWrites: 1},
		},
		{
			name: "a stale holder's write lands before the new holder's",
			grants: []grant{
				{Key: "k", Token: "a", Fence: 7, Recv: at(0), End: at(300)},
				{Key: "k", Token: "b", Fence: 8, Recv: at(200), End: at(400)},
			},
			writes: []write{{Key: "k", Token: "a", Fence: 7, At: at(250), Accepted: true}},
			want:   verdict{DoubleGrants: 1, StaleWrites: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(tt.grants, tt.writes)
			if counts(got) != counts(tt.want) {
				t.Errorf("check = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRegister: the register refuses a fence below the last accepted, and
// the same fence under another token.
func TestRegister(t *testing.T) {
	h := newHistory()
	steps := []struct {
		token string
		fence int64
		want  bool
	}{{"a", 5, true}, {"a", 5, true}, {"b", 5, false}, {"b", 4, false}, {"c", 6, true}, {"a", 5, false}}
	for _, s := range steps {
		if got := h.write("k", s.token, s.fence); got != s.want {
			t.Errorf("write(%s, %d) = %v, want %v", s.token, s.fence, got, s.want)
		}
	}
	if !h.write("other", "z", 1) {
		t.Error("another key's register refused its first write")
	}
}

func counts(v verdict) [4]int {
	return [4]int{v.DoubleGrants, v.FenceRegressed, v.StaleWrites, v.RefusedWrites}
}

// TestLongestGap: from the start to the first grant, between grants, and
// from the last to the end; expired and late grants do not count.
func TestLongestGap(t *testing.T) {
	grants := []grant{
		{Recv: at(100), End: at(200)},
		{Recv: at(150), End: at(140)}, // arrived expired
		{Recv: at(400), End: at(500)},
		{Recv: at(990), End: at(2000)}, // after the end
	}
	if got, want := longestGap(grants, at(0), at(900)), 500*time.Millisecond; got != want {
		t.Errorf("longestGap = %v, want %v", got, want)
	}
}
