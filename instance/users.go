package instance

import "go.uber.org/zap"

// warnUsersOpen warns when [[users]] are configured but the default user
// has no password: users are then only a way to narrow a client's rights,
// since a client that does not authenticate at all is the default user
// and may run every command on every key.
func (in *Instance) warnUsersOpen() {
	if len(in.cfg.Users) == 0 || in.secrets.clients != "" {
		return
	}
	in.log.Warn("[[users]] are configured but the default user has no password: a client that sends no AUTH may run every command on every key; "+
		"set password_file (or LOCKPROXY_PASSWORD) to make the users' limits binding",
		zap.Int("users", len(in.cfg.Users)))
}
