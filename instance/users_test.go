package instance_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestUsers: AUTH user pass and HELLO 3 AUTH against [[users]], ACL
// WHOAMI, Redis's NOPERM texts for a command family or a key a user may
// not use, the default user's password beside them, and SIGHUP's reload
// of the users (a password file included).
func TestUsers(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Password = "root-pw"
	bobFile := filepath.Join(t.TempDir(), "bob.pw")
	if err := os.WriteFile(bobFile, []byte("bob-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Users = []instance.UserConfig{
		{Name: "alice", Password: "alice-pw", Keys: []string{"app:*"}, Commands: "native"},
		{Name: "bob", PasswordFile: bobFile, Keys: []string{"*"}, Commands: "legacy"},
	}
	in := startInstance(t, cfg)
	ctx := t.Context()

	alice := redis.NewClient(&redis.Options{Addr: in.Addr(), Username: "alice", Password: "alice-pw", Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { alice.Close() })
	if who, err := alice.Do(ctx, "ACL", "WHOAMI").Text(); who != "alice" || err != nil {
		t.Fatalf("ACL WHOAMI: %q %v", who, err)
	}
	mustLock(t, alice, "app:"+uniqueKey(t), "PX", 5000)
	wantErr(t, alice.Do(ctx, "LOCK", "other:"+uniqueKey(t), "PX", 5000).Err(), "NOPERM No permissions to access a key")
	wantErr(t, alice.Do(ctx, "SET", "app:x", "v", "NX", "PX", 5000).Err(), "NOPERM User alice has no permissions to run the 'set' command")
	if err := alice.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after NOPERM: %v", err)
	}

	bob := redis.NewClient(&redis.Options{Addr: in.Addr(), Username: "bob", Password: "bob-pw", Protocol: 3, MaxRetries: -1})
	t.Cleanup(func() { bob.Close() })
	if who, err := bob.Do(ctx, "ACL", "WHOAMI").Text(); who != "bob" || err != nil {
		t.Fatalf("HELLO 3 AUTH bob; ACL WHOAMI: %q %v", who, err)
	}
	if ok, err := bob.SetNX(ctx, uniqueKey(t), "v", 0).Result(); !ok || err != nil {
		t.Fatalf("bob SETNX: %v %v", ok, err)
	}
	wantErr(t, bob.Do(ctx, "LOCK", uniqueKey(t)).Err(), "NOPERM User bob has no permissions to run the 'lock' command")

	root := newClient(t, in.Addr(), 2)
	wantErr(t, root.Do(ctx, "AUTH", "alice", "wrong").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	if err := root.Do(ctx, "AUTH", "root-pw").Err(); err != nil {
		t.Fatal(err)
	}
	if who, _ := root.Do(ctx, "ACL", "WHOAMI").Text(); who != "default" {
		t.Fatalf("default user's WHOAMI: %q", who)
	}
	mustLock(t, root, "other:"+uniqueKey(t), "PX", 5000)

	// Reload: alice now may lock other:*, bob's file holds a new password.
	next := cfg
	next.Users = []instance.UserConfig{cfg.Users[0], cfg.Users[1]}
	next.Users[0].Keys = []string{"other:*"}
	if err := os.WriteFile(bobFile, []byte("bob-pw2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	applied, _, err := in.Reload(next)
	if err != nil || !strings.Contains(strings.Join(applied, ","), "users") {
		t.Fatalf("reload: applied %v err %v", applied, err)
	}
	mustLock(t, alice, "other:"+uniqueKey(t), "PX", 5000)
	wantErr(t, alice.Do(ctx, "LOCK", "app:"+uniqueKey(t), "PX", 5000).Err(), "NOPERM No permissions to access a key")
	wantErr(t, root.Do(ctx, "AUTH", "bob", "bob-pw").Err(), "WRONGPASS")
	if err := root.Do(ctx, "AUTH", "bob", "bob-pw2").Err(); err != nil {
		t.Fatalf("bob's new password: %v", err)
	}
}

// TestUserConfigMistakes: bad [[users]] entries stop the start.
func TestUserConfigMistakes(t *testing.T) {
	for want, u := range map[string][]instance.UserConfig{
		"pick another name":   {{Name: "default", Password: "x"}},
		"configured twice":    {{Name: "a", Password: "x"}, {Name: "a", Password: "y"}},
		"exactly one of":      {{Name: "a"}},
		"want native, legacy": {{Name: "a", Password: "x", Commands: "some"}},
		"must be non-empty":   {{Name: "a b", Password: "x"}},
		"no such file":        {{Name: "a", PasswordFile: "/nonexistent/pw"}},
	} {
		cfg := instance.Default()
		cfg.Listen = "127.0.0.1:0"
		cfg.Users = u
		in, err := instance.Start(cfg, quietLogger(t))
		if err == nil {
			in.Shutdown(context.Background())
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", u, err, want)
		}
	}
}

func wantErr(t *testing.T, err error, prefix string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("error %v, want %q", err, prefix)
	}
}

// TestUsersDoNotReachTheDataRedis: with passthrough on, an ACL user is
// confined to its lock commands: its data commands are not forwarded (the
// data Redis never sees them), while the default user's are.
func TestUsersDoNotReachTheDataRedis(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Password = "root-pw"
	cfg.Passthrough.Address = data.Addr()
	cfg.Users = []instance.UserConfig{{Name: "alice", Password: "alice-pw", Keys: []string{"app:*"}, Commands: "all"}}
	in := startInstance(t, cfg)
	ctx := t.Context()

	alice := redis.NewClient(&redis.Options{Addr: in.Addr(), Username: "alice", Password: "alice-pw", Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { alice.Close() })
	if err := alice.Set(ctx, "app:data", "v", 0).Err(); err == nil {
		t.Fatal("an ACL user's SET reached the data Redis")
	}
	if err := alice.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the refusal: %v", err)
	}
	direct := newClient(t, data.Addr(), 2)
	if n := direct.Exists(ctx, "app:data").Val(); n != 0 {
		t.Fatal("the data Redis holds the ACL user's key")
	}
	mustLock(t, alice, "app:"+uniqueKey(t), "PX", 5000) // its locks still work

	root := redis.NewClient(&redis.Options{Addr: in.Addr(), Password: "root-pw", Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { root.Close() })
	if err := root.Set(ctx, "app:data", "v", 0).Err(); err != nil {
		t.Fatalf("the default user's SET: %v", err)
	}
	if v := direct.Get(ctx, "app:data").Val(); v != "v" {
		t.Fatalf("the data Redis holds %q for the default user's SET", v)
	}
}
