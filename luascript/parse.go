package luascript

import (
	"bytes"
	"fmt"
	"strings"
)

// This file parses Lua 5.1 source into the small syntax tree that the
// admission check (admit.go) walks. It follows the grammar of the Lua 5.1
// reference manual, section 8, and refuses what it cannot parse: the
// admission check must never guess what a script does.

// token is one lexed token: its kind, canonical text (see Normalize) and
// the line it ends on.
type token struct {
	kind int
	text string
	line int
}

// exprKind is the kind of an expression node.
type exprKind uint8

const (
	eName   exprKind = iota // name
	eConst                  // nil, true, false or a number: text
	eString                 // a string literal: text (canonical, quoted)
	eVararg                 // ...
	eIndex                  // obj[sub]
	eField                  // obj.name
	eCall                   // obj(args...)
	eMethod                 // obj:name(args...)
	eBinop                  // obj name sub
	eUnop                   // name obj
	eParen                  // (obj)
	eTable                  // { args... } (keys and values alike)
	eFunc                   // function ... end: fn
)

type expr struct {
	kind exprKind
	text string // name, constant, string literal, operator or field
	line int
	obj  *expr
	sub  *expr
	args []*expr
	fn   *funcBody
}

type funcBody struct {
	params []string
	body   []*stat
}

// statKind is the kind of a statement node.
type statKind uint8

const (
	sAssign    statKind = iota // targets = exprs
	sLocal                     // local names [= exprs]
	sCall                      // exprs[0], a call
	sBlock                     // do, while, repeat, if: exprs are the conditions, blocks the bodies
	sNumFor                    // for names[0] = exprs do blocks[0]
	sGenFor                    // for names in exprs do blocks[0]
	sFunc                      // function targets[0] fn (a global or field)
	sLocalFunc                 // local function names[0] fn
	sReturn                    // return exprs
	sBreak                     // break
)

type stat struct {
	kind    statKind
	line    int
	names   []string
	targets []*expr
	exprs   []*expr
	blocks  [][]*stat
	fn      *funcBody
}

// maxDepth bounds the nesting of blocks and expressions, as Lua's
// LUAI_MAXCCALLS (200) bounds its parser's recursion.
const maxDepth = 200

// ParseError is a script the admission check cannot parse.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

type parser struct {
	toks  []token
	pos   int
	depth int
}

// parse parses a whole Lua chunk.
func parse(src []byte) (block []*stat, err error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(*ParseError)
			if !ok {
				panic(r)
			}
			block, err = nil, pe
		}
	}()
	block = p.block()
	if !p.at(tkEOF, "") {
		p.fail("'%s' where a statement was expected", p.peek().text)
	}
	return block, nil
}

// tokenize lexes src with the normaliser's lexer.
func tokenize(src []byte) ([]token, error) {
	lx := lexer{src: src}
	var toks []token
	for {
		kind, text, err := lx.next()
		line := 1 + bytes.Count(src[:min(lx.pos, len(src))], []byte{'\n'})
		if err != nil {
			return nil, &ParseError{Line: line, Msg: err.(*LexError).Msg}
		}
		toks = append(toks, token{kind: kind, text: text, line: line})
		if kind == tkEOF {
			return toks, nil
		}
	}
}

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) at(kind int, text string) bool {
	t := p.toks[p.pos]
	return t.kind == kind && (text == "" || t.text == text)
}

// atOp reports whether the next token is the operator or keyword s.
func (p *parser) atOp(s string) bool {
	t := p.toks[p.pos]
	return (t.kind == tkOp || t.kind == tkName && keywords[t.text]) && t.text == s
}

func (p *parser) take() token {
	t := p.toks[p.pos]
	if t.kind != tkEOF {
		p.pos++
	}
	return t
}

func (p *parser) accept(s string) bool {
	if p.atOp(s) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expect(s string) {
	if !p.accept(s) {
		p.fail("'%s' expected near '%s'", s, p.peek().text)
	}
}

func (p *parser) fail(format string, args ...any) {
	panic(&ParseError{Line: p.peek().line, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) name() string {
	t := p.peek()
	if t.kind != tkName || keywords[t.text] {
		p.fail("name expected near '%s'", t.text)
	}
	p.pos++
	return t.text
}

func (p *parser) enter() {
	if p.depth++; p.depth > maxDepth {
		p.fail("nested too deeply")
	}
}

func (p *parser) leave() { p.depth-- }

var keywords = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true, "false": true,
	"for": true, "function": true, "if": true, "in": true, "local": true, "nil": true, "not": true,
	"or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true,
}

func (p *parser) blockEnds() bool {
	return p.at(tkEOF, "") || p.atOp("end") || p.atOp("else") || p.atOp("elseif") || p.atOp("until")
}

func (p *parser) block() []*stat {
	p.enter()
	defer p.leave()
	var out []*stat
	for !p.blockEnds() {
		s := p.statement()
		p.accept(";")
		out = append(out, s)
		if s.kind == sReturn || s.kind == sBreak {
			if !p.blockEnds() {
				p.fail("'end' expected near '%s'", p.peek().text)
			}
		}
	}
	return out
}

func (p *parser) statement() *stat {
	line := p.peek().line
	s := &stat{line: line}
	switch {
	case p.accept("if"):
		s.kind = sBlock
		for {
			s.exprs = append(s.exprs, p.expr())
			p.expect("then")
			s.blocks = append(s.blocks, p.block())
			if !p.accept("elseif") {
				break
			}
		}
		if p.accept("else") {
			s.blocks = append(s.blocks, p.block())
		}
		p.expect("end")
	case p.accept("while"):
		s.kind, s.exprs = sBlock, []*expr{p.expr()}
		p.expect("do")
		s.blocks = [][]*stat{p.block()}
		p.expect("end")
	case p.accept("do"):
		s.kind, s.blocks = sBlock, [][]*stat{p.block()}
		p.expect("end")
	case p.accept("repeat"):
		s.kind, s.blocks = sBlock, [][]*stat{p.block()}
		p.expect("until")
		s.exprs = []*expr{p.expr()}
	case p.accept("for"):
		p.forStat(s)
	case p.accept("function"):
		s.kind = sFunc
		target := &expr{kind: eName, text: p.name(), line: line}
		for p.accept(".") {
			target = &expr{kind: eField, obj: target, text: p.name(), line: line}
		}
		method := p.accept(":")
		if method {
			target = &expr{kind: eField, obj: target, text: p.name(), line: line}
		}
		s.targets, s.fn = []*expr{target}, p.funcBody(method)
	case p.accept("local"):
		if p.accept("function") {
			s.kind, s.names = sLocalFunc, []string{p.name()}
			s.fn = p.funcBody(false)
			break
		}
		s.kind, s.names = sLocal, p.names()
		if p.accept("=") {
			s.exprs = p.exprList()
		}
	case p.accept("return"):
		s.kind = sReturn
		if !p.blockEnds() && !p.atOp(";") {
			s.exprs = p.exprList()
		}
	case p.accept("break"):
		s.kind = sBreak
	default:
		p.exprStat(s)
	}
	return s
}

func (p *parser) forStat(s *stat) {
	first := p.name()
	if p.accept("=") {
		s.kind, s.names = sNumFor, []string{first}
		s.exprs = []*expr{p.expr()}
		p.expect(",")
		s.exprs = append(s.exprs, p.expr())
		if p.accept(",") {
			s.exprs = append(s.exprs, p.expr())
		}
	} else {
		s.kind, s.names = sGenFor, []string{first}
		for p.accept(",") {
			s.names = append(s.names, p.name())
		}
		p.expect("in")
		s.exprs = p.exprList()
	}
	p.expect("do")
	s.blocks = [][]*stat{p.block()}
	p.expect("end")
}

func (p *parser) names() []string {
	out := []string{p.name()}
	for p.accept(",") {
		out = append(out, p.name())
	}
	return out
}

func (p *parser) exprStat(s *stat) {
	e := p.primary()
	if p.atOp("=") || p.atOp(",") {
		s.kind, s.targets = sAssign, []*expr{e}
		for p.accept(",") {
			s.targets = append(s.targets, p.primary())
		}
		p.expect("=")
		s.exprs = p.exprList()
		for _, t := range s.targets {
			if t.kind != eName && t.kind != eIndex && t.kind != eField {
				p.fail("cannot assign to this expression")
			}
		}
		return
	}
	if e.kind != eCall && e.kind != eMethod {
		p.fail("syntax error near '%s'", p.peek().text)
	}
	s.kind, s.exprs = sCall, []*expr{e}
}

func (p *parser) funcBody(method bool) *funcBody {
	p.enter()
	defer p.leave()
	f := &funcBody{}
	if method {
		f.params = append(f.params, "self")
	}
	p.expect("(")
	for !p.atOp(")") {
		if p.accept("...") {
			break
		}
		f.params = append(f.params, p.name())
		if !p.accept(",") {
			break
		}
	}
	p.expect(")")
	f.body = p.block()
	p.expect("end")
	return f
}

func (p *parser) exprList() []*expr {
	out := []*expr{p.expr()}
	for p.accept(",") {
		out = append(out, p.expr())
	}
	return out
}

// Binary operator priorities (left, right), from Lua 5.1's lparser.c.
var binPriority = map[string][2]int{
	"+": {6, 6}, "-": {6, 6}, "*": {7, 7}, "/": {7, 7}, "%": {7, 7}, "^": {10, 9}, "..": {5, 4},
	"==": {3, 3}, "~=": {3, 3}, "<": {3, 3}, "<=": {3, 3}, ">": {3, 3}, ">=": {3, 3}, "and": {2, 2}, "or": {1, 1},
}

const unaryPriority = 8

func (p *parser) expr() *expr { return p.subexpr(0) }

func (p *parser) subexpr(limit int) *expr {
	p.enter()
	defer p.leave()
	var e *expr
	if t := p.peek(); p.atOp("not") || p.atOp("-") || p.atOp("#") {
		p.pos++
		e = &expr{kind: eUnop, text: t.text, line: t.line, obj: p.subexpr(unaryPriority)}
	} else {
		e = p.simple()
	}
	for {
		t := p.peek()
		prio, ok := binPriority[t.text]
		if !ok || !p.atOp(t.text) || prio[0] <= limit {
			return e
		}
		p.pos++
		e = &expr{kind: eBinop, text: t.text, line: t.line, obj: e, sub: p.subexpr(prio[1])}
	}
}

func (p *parser) simple() *expr {
	t := p.peek()
	switch {
	case t.kind == tkNumber, p.atOp("nil"), p.atOp("true"), p.atOp("false"):
		p.pos++
		return &expr{kind: eConst, text: t.text, line: t.line}
	case t.kind == tkString:
		p.pos++
		return &expr{kind: eString, text: t.text, line: t.line}
	case p.atOp("..."):
		p.pos++
		return &expr{kind: eVararg, line: t.line}
	case p.atOp("{"):
		return p.table()
	case p.accept("function"):
		return &expr{kind: eFunc, line: t.line, fn: p.funcBody(false)}
	}
	return p.primary()
}

func (p *parser) primary() *expr {
	p.enter()
	defer p.leave()
	t := p.peek()
	var e *expr
	switch {
	case p.accept("("):
		e = &expr{kind: eParen, line: t.line, obj: p.expr()}
		p.expect(")")
	case t.kind == tkName && !keywords[t.text]:
		p.pos++
		e = &expr{kind: eName, text: t.text, line: t.line}
	default:
		p.fail("unexpected symbol near '%s'", t.text)
	}
	for {
		t := p.peek()
		switch {
		case p.accept("."):
			e = &expr{kind: eField, obj: e, text: p.name(), line: t.line}
		case p.accept("["):
			e = &expr{kind: eIndex, obj: e, sub: p.expr(), line: t.line}
			p.expect("]")
		case p.accept(":"):
			name := p.name()
			e = &expr{kind: eMethod, obj: e, text: name, line: t.line, args: p.callArgs()}
		case p.atOp("(") || p.atOp("{") || t.kind == tkString:
			e = &expr{kind: eCall, obj: e, line: t.line, args: p.callArgs()}
		default:
			return e
		}
	}
}

func (p *parser) callArgs() []*expr {
	t := p.peek()
	switch {
	case t.kind == tkString:
		p.pos++
		return []*expr{{kind: eString, text: t.text, line: t.line}}
	case p.atOp("{"):
		return []*expr{p.table()}
	}
	p.expect("(")
	if p.accept(")") {
		return nil
	}
	args := p.exprList()
	p.expect(")")
	return args
}

// table parses a table constructor; its keys and values are its args.
func (p *parser) table() *expr {
	p.enter()
	defer p.leave()
	e := &expr{kind: eTable, line: p.peek().line}
	p.expect("{")
	for !p.atOp("}") {
		switch {
		case p.accept("["):
			e.args = append(e.args, p.expr())
			p.expect("]")
			p.expect("=")
		case p.peek().kind == tkName && !keywords[p.peek().text] && p.toks[p.pos+1].text == "=" && p.toks[p.pos+1].kind == tkOp:
			p.pos += 2 // name = value: the name is a constant key
		}
		e.args = append(e.args, p.expr())
		if !p.accept(",") && !p.accept(";") {
			break
		}
	}
	p.expect("}")
	return e
}

// unquoteCanonical turns a canonical string literal (see quote) back into its bytes.
func unquoteCanonical(q string) string {
	q = q[1 : len(q)-1]
	if !strings.ContainsRune(q, '\\') {
		return q
	}
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if q[i] != '\\' {
			b.WriteByte(q[i])
			continue
		}
		if c := q[i+1]; c == '"' || c == '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		b.WriteByte((q[i+1]-'0')*100 + (q[i+2]-'0')*10 + q[i+3] - '0')
		i += 3
	}
	return b.String()
}
