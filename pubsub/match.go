package pubsub

// Match reports whether s matches the glob pattern as Redis matches it
// (stringmatchlen: KEYS, SCAN MATCH, PSUBSCRIBE, and lockproxy's lock_keys
// and lock_delay patterns): * any run, ? one byte, [abc] [^a-z] a class
// (a range's ends in either order; \x in a class is x; a class left open
// runs to the end of the pattern), \x a literal x (a \ that ends the
// pattern is itself). As in Redis, an empty s matches only an empty
// pattern. It runs in O(len(pattern)·len(s)) time with no recursion.
func Match(pattern, s string) bool {
	if s == "" {
		return pattern == ""
	}
	px, sx := 0, 0
	starP, starS := -1, 0 // where to resume after the last *
	for sx < len(s) {
		if px < len(pattern) {
			if pattern[px] == '*' {
				starP, starS = px, sx
				px++
				continue
			}
			if n, ok := token(pattern[px:], s[sx]); ok {
				px += n
				sx++
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		px, sx = starP+1, starS
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// token matches b against the one-byte token at the start of p (not a *)
// and returns the token's length and whether b matches it.
func token(p string, b byte) (int, bool) {
	switch {
	case p[0] == '?':
		return 1, true
	case p[0] == '[':
		return class(p, b)
	case p[0] == '\\' && len(p) > 1:
		return 2, p[1] == b
	}
	return 1, p[0] == b
}

// class matches b against the class at the start of p ("[...]") and
// returns the class's length and whether b is in it, as Redis reads it: a
// range takes the byte after '-' as its end even when that is ']'.
func class(p string, b byte) (int, bool) {
	i := 1
	not := i < len(p) && p[i] == '^'
	if not {
		i++
	}
	in := false
	for ; i < len(p) && p[i] != ']'; i++ {
		switch {
		case p[i] == '\\' && i+1 < len(p):
			i++
			in = in || p[i] == b
		case i+2 < len(p) && p[i+1] == '-':
			lo, hi := p[i], p[i+2]
			if lo > hi {
				lo, hi = hi, lo
			}
			in = in || lo <= b && b <= hi
			i += 2
		default:
			in = in || p[i] == b
		}
	}
	if i < len(p) {
		i++ // the closing ]
	}
	return i, in != not
}
