package resp

import "testing"

func TestDBKeyRoundTrip(t *testing.T) {
	for _, c := range []struct {
		db        int
		key, want string
	}{
		{0, "k", "k"}, {1, "k", "lockproxy:db1:k"}, {15, "a:b", "lockproxy:db15:a:b"}, {1, "", "lockproxy:db1:"},
	} {
		if got := DBKey(c.db, c.key); got != c.want {
			t.Errorf("DBKey(%d, %q) = %q, want %q", c.db, c.key, got, c.want)
		}
		if got := ClientKey(c.want); got != c.key {
			t.Errorf("ClientKey(%q) = %q, want %q", c.want, got, c.key)
		}
	}
	for _, stored := range []string{"lockproxy:db16:k", "lockproxy:db0:k", "lockproxy:db01:k", "lockproxy:dbx:k", "lockproxy:db1", "lockproxy:lock:k"} {
		if got := ClientKey(stored); got != stored {
			t.Errorf("ClientKey(%q) = %q: not a database prefix", stored, got)
		}
	}
}

// FuzzClientKey: a key stored in database n > 0 reads back as the client's.
func FuzzClientKey(f *testing.F) {
	f.Add(3, "lock")
	f.Add(1, "lockproxy:db2:x")
	f.Fuzz(func(t *testing.T, n int, key string) {
		n = 1 + (n%15+15)%15
		if got := ClientKey(DBKey(n, key)); got != key {
			t.Fatalf("ClientKey(DBKey(%d, %q)) = %q", n, key, got)
		}
		_ = ClientKey(key) // any bytes: no panic
	})
}
