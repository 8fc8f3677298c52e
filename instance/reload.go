package instance

import (
	"reflect"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// reloadable are the keys Reload applies to a running instance; log_level
// is applied by the caller, which owns the logger. The limits are those the
// RESP server enforces (resp.Server.SetLimits); max_key_bytes,
// max_token_bytes, max_waiters and max_blocked_clients need a restart.
var reloadable = []string{"password", "password_file", "log_level", "users",
	"limits.max_clients", "limits.max_bulk_bytes", "limits.max_args", "limits.max_inline_bytes",
	"limits.max_request_bytes", "limits.max_buffered_bytes", "limits.auth_timeout_ms", "limits.idle_timeout_ms"}

// Reload applies what can change safely in a running instance — the
// clients' password (re-reading password_file), the users, the RESP
// server's limits — re-reads every TLS file (certificates, keys and CAs of
// the listener, the Redis nodes, ZooKeeper and the data Redis, changed or
// not), and logs
// it. It returns the keys that changed and were applied ("tls files" when
// there are any), and those that changed but need a restart (logged as
// such). An invalid cfg changes nothing; a TLS file that does not load is
// logged and its previous content stays in use. Calls must not overlap
// (main makes them one at a time, on SIGHUP).
func (in *Instance) Reload(cfg Config) (applied, restart []string, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	pass, err := cfg.clientPassword()
	if err != nil {
		return nil, nil, err
	}
	users, err := cfg.users()
	if err != nil {
		return nil, nil, err
	}
	for _, key := range changedKeys(in.cfg, cfg) {
		if slices.Contains(reloadable, key) {
			applied = append(applied, key)
		} else {
			restart = append(restart, key)
		}
	}
	if pass != in.secrets.clients {
		in.resp.SetPassword(pass)
		in.secrets.clients = pass
		if !slices.Contains(applied, "password") {
			applied = append(applied, "password")
		}
	}
	if !reflect.DeepEqual(users, in.secrets.users) { // a password file may have changed alone
		in.resp.SetUsers(users)
		in.secrets.users = users
		if !slices.Contains(applied, "users") {
			applied = append(applied, "users")
		}
	}
	in.cfg.Password, in.cfg.PasswordFile, in.cfg.LogLevel, in.cfg.Users = cfg.Password, cfg.PasswordFile, cfg.LogLevel, cfg.Users
	in.reloadLimits(cfg.Limits)
	if err := in.tlsFiles.Reload(); err != nil {
		in.reloadFailed(err)
	} else if in.listenTLS != nil || in.nodesTLS != nil || in.zkTLS != nil || in.router != nil && in.cfg.Passthrough.TLS.Enabled {
		applied = append(applied, "tls files")
	}
	in.log.Info("configuration reloaded", zap.Strings("applied", applied))
	if len(restart) > 0 {
		in.log.Warn("changed settings need a restart to take effect", zap.Strings("keys", restart))
	}
	return applied, restart, nil
}

// reloadLimits applies the reloadable limits of l and keeps the others.
func (in *Instance) reloadLimits(l LimitsConfig) {
	l.MaxKeyBytes, l.MaxTokenBytes, l.MaxWaiters = in.cfg.Limits.MaxKeyBytes, in.cfg.Limits.MaxTokenBytes, in.cfg.Limits.MaxWaiters
	l.MaxBlockedClients = in.cfg.Limits.MaxBlockedClients
	in.cfg.Limits = l
	in.resp.SetLimits(l.MaxClients, respLimits(l))
}

// changedKeys lists the dotted toml keys whose values differ.
func changedKeys(a, b Config) []string {
	var keys []string
	var walk func(x, y reflect.Value, path []string)
	walk = func(x, y reflect.Value, path []string) {
		for i := 0; i < x.NumField(); i++ {
			key := append(slices.Clone(path), x.Type().Field(i).Tag.Get("toml"))
			if x.Field(i).Kind() == reflect.Struct {
				walk(x.Field(i), y.Field(i), key)
			} else if !reflect.DeepEqual(x.Field(i).Interface(), y.Field(i).Interface()) {
				keys = append(keys, strings.Join(key, "."))
			}
		}
	}
	walk(reflect.ValueOf(a), reflect.ValueOf(b), nil)
	return keys
}
