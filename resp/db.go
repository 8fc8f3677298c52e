package resp

import "strconv"

// Databases is how many databases SELECT offers: Redis's default 16.
const Databases = 16

// SELECT's databases are key namespaces on the one lock backend. Database 0
// keeps the keys as the client sends them; in database n > 0 a key is
// stored as DBKey(n, key), "lockproxy:db<n>:key". The prefix is applied
// once, here, before the handler runs, to the arguments the command's Keys
// names: handlers, the engine and the backends see only stored keys. A
// database-0 key that begins with "lockproxy:db" can therefore meet a key
// of another database; the README reserves the prefix.

// dbPrefix is the stored prefix of database n's keys.
func dbPrefix(n int) string { return "lockproxy:db" + strconv.Itoa(n) + ":" }

// DBKey is the stored key of key in database n.
func DBKey(n int, key string) string {
	if n == 0 {
		return key
	}
	return dbPrefix(n) + key
}

// ClientKey is the key as a client of its database named it: a stored key
// without its database prefix.
func ClientKey(stored string) string {
	const p = "lockproxy:db"
	if len(stored) <= len(p) || stored[:len(p)] != p {
		return stored
	}
	i := len(p)
	for i < len(stored) && stored[i] >= '0' && stored[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(stored[len(p):i])
	if err != nil || n <= 0 || n >= Databases || i == len(stored) || stored[i] != ':' || stored[len(p)] == '0' {
		return stored
	}
	return stored[i+1:]
}

// inDB rewrites the key arguments of a command run in database db > 0 to
// their stored form. Keys returns sub-slices of args, so its elements are
// args' own.
func inDB(db int, def *Command, args [][]byte) {
	if db == 0 || def.Keys == nil {
		return
	}
	keys := def.Keys(args)
	for i, k := range keys {
		keys[i] = append([]byte(dbPrefix(db)), k...)
	}
}
