package upstream

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Survey is what a node holds of lockproxy's, read once at start-up before
// the node is used: which server it is, and whether any lockproxy has
// used it (see instance/newnodes.go).
type Survey struct {
	// RunID names the node's server process: two addresses with the same
	// run id reach one server.
	RunID string
	// Vetted is the run id recorded as vetted on the node ("" for none or
	// cleared): the process an instance counted after its hold-out, or
	// found new.
	Vetted string
	// Durable is true when the node is verified to run with appendonly yes
	// and appendfsync always (read with CONFIG GET).
	Durable bool
	// Empty is true when the node holds no key at all (DBSIZE 0).
	Empty bool
	// Keys are up to surveyKeys of lockproxy's keys on the node (under
	// its prefix), when the survey looked for them; none on a node no
	// lockproxy has used.
	Keys []string
}

// surveyKeys is how many of lockproxy's keys a Survey names.
const surveyKeys = 3

// surveyScan bounds the SCAN calls of one survey: on a node with many
// keys, none under the prefix, a survey gives up rather than run for
// ever (ErrSurveyTooLarge).
const surveyScan = 10000

// ErrSurveyTooLarge says a node has too many keys to survey at start-up.
var ErrSurveyTooLarge = errors.New("too many keys to look through for lockproxy's")

// Survey reads the node's run id, its vetted record, its durability and
// whether it holds any key; with scan, also up to surveyKeys of the keys
// under the prefix (SCAN MATCH, 1000 keys a call: on a large keyspace this
// costs a walk over it, so only --new-nodes asks for it).
func (n *RedisNode) Survey(ctx context.Context, scan bool) (Survey, error) {
	var s Survey
	info, err := n.client.Info(ctx, "server").Result()
	if err != nil {
		return s, err
	}
	if s.RunID = infoField(info, "run_id"); s.RunID == "" {
		return s, badReply("INFO server", info)
	}
	if s.Vetted, err = n.client.Get(ctx, n.prefix+"vetted").Result(); err != nil && !errors.Is(err, redis.Nil) {
		return s, err
	}
	aof, aerr := n.client.ConfigGet(ctx, "appendonly").Result()
	fsync, ferr := n.client.ConfigGet(ctx, "appendfsync").Result()
	s.Durable = aerr == nil && ferr == nil && aof["appendonly"] == "yes" && fsync["appendfsync"] == "always"
	size, err := n.client.DBSize(ctx).Result()
	if err != nil {
		return s, err
	}
	if s.Empty = size == 0; s.Empty || !scan {
		return s, nil
	}
	s.Keys, err = n.scanPrefix(ctx)
	return s, err
}

// scanPrefix returns up to surveyKeys keys under the prefix.
func (n *RedisNode) scanPrefix(ctx context.Context) ([]string, error) {
	var found []string
	cursor := uint64(0)
	for range surveyScan {
		keys, next, err := n.client.Scan(ctx, cursor, globEscape(n.prefix)+"*", 1000).Result()
		if err != nil {
			return nil, err
		}
		found = append(found, keys...)
		if len(found) >= surveyKeys {
			return found[:surveyKeys], nil
		}
		if cursor = next; cursor == 0 {
			return found, nil
		}
	}
	return found, ErrSurveyTooLarge
}

// PristinePrefix starts the vetted record of a process that held none of
// lockproxy's keys, on any node of its set, when a lockproxy first met it:
// "pristine:<run id>" (MarkPristine).
const PristinePrefix = "pristine:"

// CountedUnvetted is the vetted record an instance with the restart rule
// off leaves in place of a pristine one: it counts the node whatever it
// lost, so the node is no longer as it was found.
const CountedUnvetted = "counted with the restart rule off"

// MarkPristine records, unless the node has a vetted record already, that
// its process runID held none of lockproxy's keys when a lockproxy first
// met it (with every other node of the set as empty). It reports whether
// it did.
func (n *RedisNode) MarkPristine(ctx context.Context, runID string) (bool, error) {
	return n.client.SetNX(ctx, n.prefix+"vetted", PristinePrefix+runID, 0).Result()
}

// UnmarkPristine replaces a pristine record, if the node has one, with
// CountedUnvetted (atomically: a record written meanwhile stays).
func (n *RedisNode) UnmarkPristine(ctx context.Context) error {
	key := n.prefix + "vetted"
	return n.client.Watch(ctx, func(tx *redis.Tx) error {
		v, err := tx.Get(ctx, key).Result()
		if err != nil || !strings.HasPrefix(v, PristinePrefix) {
			return nil // none, or not pristine: nothing to do
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, CountedUnvetted, 0)
			return nil
		})
		return err
	}, key)
}

// globEscape quotes the glob characters of s for SCAN MATCH.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}
