import sys, re, hashlib
src = open(sys.argv[1]).read()
i = 0; n = len(src)
runs = []  # (startline, [literals], tail_ok)
def lineof(p): return src.count('\n', 0, p) + 1
def skip_ws(p):
    while p < n:
        if src[p].isspace(): p += 1
        elif src.startswith('//', p): p = src.index('\n', p)
        elif src.startswith('/*', p): p = src.index('*/', p) + 2
        else: break
    return p
def read_lit(p):
    assert src[p] == '"'
    p += 1; out = []
    while src[p] != '"':
        c = src[p]
        if c == '\\':
            e = src[p+1]
            m = {'n':'\n','t':'\t','r':'\r','"':'"',"'":"'",'\\':'\\','b':'\b','f':'\f','0':'\0'}
            if e == 'u':
                out.append(chr(int(src[p+2:p+6],16))); p += 6; continue
            out.append(m[e]); p += 2; continue
        out.append(c); p += 1
    return ''.join(out), p + 1
while i < n:
    if src.startswith('//', i): i = src.index('\n', i); continue
    if src.startswith('/*', i): i = src.index('*/', i) + 2; continue
    if src[i] == "'":  # char literal
        j = i+1
        if src[j] == '\\': j += 2
        else: j += 1
        i = j + 1; continue
    if src[i] == '"':
        start = i
        # what precedes?
        k = start - 1
        while k >= 0 and src[k].isspace(): k -= 1
        pre_plus = src[k] == '+'
        lits = []; p = i
        while True:
            s, p = read_lit(p); lits.append(s)
            q = skip_ws(p)
            if q < n and src[q] == '+':
                r = skip_ws(q+1)
                if src[r] == '"': p = r; continue
                tail = 'NONLIT'; break
            tail = 'ok'; break
        i = p
        full = ''.join(lits)
        if 'redis.call' in full or 'KEYS[' in full:
            runs.append((lineof(start), full, tail, pre_plus))
        continue
    i += 1
for ln, full, tail, pre in runs:
    print("=== line %d tail=%s preplus=%s sha1=%s len=%d" % (ln, tail, pre, hashlib.sha1(full.encode()).hexdigest(), len(full)))
    print(full)
