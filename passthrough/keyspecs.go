package passthrough

import (
	_ "embed"
	"encoding/json"
	"strconv"
	"strings"
)

// Keys as Redis finds them. Redis 7 describes where each command's keys
// are with key specifications (COMMAND INFO's key_specs): where to begin
// (an argument's index, or the argument after a keyword) and how many to
// take (a range, or a count given by an argument, as EVAL's numkeys).
// keyspecs.json holds them as redis-server 7.0 gives them, for every
// command and subcommand (TestKeySpecsAsRedis checks it against a real
// server); keysOf follows them as Redis's getKeysUsingKeySpecs does, and,
// where a spec is "unknown" (SORT's STORE), does what Redis's own key
// finder for that command does.

// keySpec is one key specification of a command.
type keySpec struct {
	Begin     string `json:"begin"`               // "index", "keyword" or "unknown"
	Index     int    `json:"index,omitempty"`     // begin at this argument (index)
	Keyword   string `json:"keyword,omitempty"`   // begin after this argument (keyword)
	StartFrom int    `json:"startfrom,omitempty"` // look for the keyword from here; < 0: from the end, backwards
	Find      string `json:"find"`                // "range", "keynum" or "unknown"
	LastKey   int    `json:"lastkey,omitempty"`   // range: the last key, relative to the first; < 0: from the end
	KeyStep   int    `json:"keystep,omitempty"`   // range and keynum: the step between keys
	Limit     int    `json:"limit,omitempty"`     // range with LastKey -1: take 1/Limit of what is left
	KeyNumIdx int    `json:"keynumidx,omitempty"` // keynum: the count's argument, relative to the beginning
	FirstKey  int    `json:"firstkey,omitempty"`  // keynum: the first key, relative to the beginning
	NotKey    bool   `json:"notkey,omitempty"`    // a shard channel, not a key
}

//go:embed keyspecs.json
var keySpecsJSON []byte

// keySpecs are the key specs by command name in lower case, "name|sub"
// for a subcommand; a command without keys has an empty list.
var keySpecs = func() map[string][]keySpec {
	m := map[string][]keySpec{}
	if err := json.Unmarshal(keySpecsJSON, &m); err != nil {
		panic("passthrough: keyspecs.json: " + err.Error())
	}
	return m
}()

// keysOf are the keys a command names (name in lower case), as Redis finds
// them. A command Redis does not know is taken to name its first argument;
// one whose arguments its specs cannot place (Redis refuses it) names none.
func keysOf(name string, args [][]byte) [][]byte {
	specs, known := specsOf(name, args)
	switch {
	case !known:
		return args[1:min(2, len(args))]
	case name == "sort" || name == "sort_ro":
		return sortKeys(args)
	}
	keys, _ := keysBySpecs(specs, args)
	return keys
}

// specsOf are the specs of the command or, for a container (OBJECT,
// MEMORY, XINFO …), of its subcommand.
func specsOf(name string, args [][]byte) ([]keySpec, bool) {
	if len(args) > 1 {
		if specs, ok := keySpecs[name+"|"+strings.ToLower(string(args[1]))]; ok {
			return specs, true
		}
	}
	specs, ok := keySpecs[name]
	return specs, ok
}

// keysBySpecs follows specs over args as Redis's getKeysUsingKeySpecs
// does; ok is false when a spec cannot be followed (an "unknown" one, or
// arguments that do not fit it), and then no key is returned.
func keysBySpecs(specs []keySpec, args [][]byte) (keys [][]byte, ok bool) {
	for _, s := range specs {
		if s.NotKey {
			continue
		}
		first, found, ok := s.begin(args)
		if !ok {
			return nil, false
		}
		if !found {
			continue
		}
		first, last, step, ok := s.span(args, first)
		if !ok || last >= len(args) || last < first || first >= len(args) {
			return nil, false
		}
		for i := first; i <= last; i += max(step, 1) {
			keys = append(keys, args[i])
		}
	}
	return keys, true
}

// begin is the index of the spec's first key; found is false when its
// keyword is absent (the spec names no key), ok false for an unknown spec.
func (s keySpec) begin(args [][]byte) (first int, found, ok bool) {
	switch s.Begin {
	case "index":
		return s.Index, true, true
	case "keyword":
		from, to, step := s.StartFrom, len(args)-1, 1
		if s.StartFrom <= 0 {
			from, to, step = len(args)+s.StartFrom, 0, -1
		}
		for i := from; i != to; i += step {
			if i >= len(args) || i < 1 {
				break
			}
			if strings.EqualFold(string(args[i]), s.Keyword) {
				return i + 1, true, true
			}
		}
		return 0, false, true
	}
	return 0, false, false
}

// span is the indexes of the spec's first and last keys, given where it
// begins, and the step between keys.
func (s keySpec) span(args [][]byte, begin int) (first, last, step int, ok bool) {
	switch s.Find {
	case "range":
		switch {
		case s.LastKey >= 0:
			return begin, begin + s.LastKey, s.KeyStep, true
		case s.Limit == 0:
			return begin, len(args) + s.LastKey, s.KeyStep, true
		}
		return begin, begin + (len(args)-begin)/s.Limit + s.LastKey, s.KeyStep, true
	case "keynum":
		if s.KeyNumIdx >= len(args)-begin {
			return 0, 0, 0, false
		}
		n, err := strconv.ParseInt(string(args[begin+s.KeyNumIdx]), 10, 32)
		if err != nil || n < 0 {
			return 0, 0, 0, false
		}
		first = begin + s.FirstKey
		return first, first + int(n) - 1, s.KeyStep, true
	}
	return 0, 0, 0, false
}

// sortKeys are SORT's keys as Redis's sortGetKeys finds them: the key
// sorted and the last STORE's destination (BY and GET patterns name keys
// only through the data).
func sortKeys(args [][]byte) [][]byte {
	if len(args) < 2 {
		return nil
	}
	keys := [][]byte{args[1]}
	var store []byte
	for i := 2; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "limit":
			i += 2
		case "get", "by":
			i++
		case "store":
			if i+1 < len(args) {
				store = args[i+1]
			}
		}
	}
	if store != nil {
		keys = append(keys, store)
	}
	return keys
}
