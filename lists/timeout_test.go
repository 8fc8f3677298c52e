package lists

import (
	"testing"
	"time"
)

func TestParseTimeout(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		err  error
	}{
		{"0", 0, nil}, {"1", time.Second, nil}, {"0.1", 100 * time.Millisecond, nil},
		{"0.0001", time.Millisecond, nil}, // rounded up to a whole ms
		{"1.5", 1500 * time.Millisecond, nil}, {"-0", 0, nil},
		{"-1", 0, errTimeoutNegative}, {"-inf", 0, errTimeoutNegative}, {"inf", 0, errTimeoutNegative},
		{"1e400", 0, errTimeoutNegative}, {"abc", 0, errTimeoutNotFloat}, {"nan", 0, errTimeoutNotFloat},
		{"", 0, errTimeoutNotFloat}, {" 1", 0, errTimeoutNotFloat}, {"1 ", 0, errTimeoutNotFloat},
		{"1e-400", 0, nil},
	} {
		got, err := parseTimeout([]byte(c.in))
		if got != c.want || err != c.err {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v, %v", c.in, got, err, c.want, c.err)
		}
	}
}

// FuzzParseTimeout: any bytes, no panic; a timeout is never negative.
func FuzzParseTimeout(f *testing.F) {
	for _, s := range []string{"0", "1.5", "-1", "inf", "0x1p-2", "1e400", "9e15"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseTimeout([]byte(s))
		if d < 0 || err != nil && d != 0 {
			t.Fatalf("parseTimeout(%q) = %v, %v", s, d, err)
		}
	})
}

func TestDebts(t *testing.T) {
	var d debts
	d.owe(1, "k", "v")
	d.owe(1, "k", "v")
	if d.pay(0, "k", "v") || d.pay(1, "k", "other") {
		t.Fatal("paid a debt nobody owes")
	}
	if !d.pay(1, "k", "v") || !d.pay(1, "k", "v") || d.pay(1, "k", "v") {
		t.Fatal("two debts pay twice, then no more")
	}
}
