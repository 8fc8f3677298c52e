package pubsub

// Match reports whether s matches the glob pattern as Redis's PSUBSCRIBE
// matches channels: * any run, ? one byte, [abc] [^a-z] a class, \x a
// literal x. It runs in O(len(pattern)·len(s)) time with no recursion.
func Match(pattern, s string) bool {
	px, sx := 0, 0
	starP, starS := -1, 0 // where to resume after the last *
	for sx < len(s) {
		if px < len(pattern) {
			switch pattern[px] {
			case '*':
				starP, starS = px, sx
				px++
				continue
			case '?':
				px++
				sx++
				continue
			case '[':
				if n, ok := class(pattern[px:], s[sx]); n > 0 && ok {
					px += n
					sx++
					continue
				}
			case '\\':
				if px+1 < len(pattern) && pattern[px+1] == s[sx] {
					px += 2
					sx++
					continue
				}
			default:
				if pattern[px] == s[sx] {
					px++
					sx++
					continue
				}
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

// class matches b against the class at the start of p ("[...]") and
// returns the class's length and whether b is in it. An unclosed class
// runs to the end of p, as in Redis.
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
		case i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']':
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
