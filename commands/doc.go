// Package commands is lockproxy's command table for locks: it parses and
// validates each command's arguments, calls the lock engine and writes the
// reply. Domain errors become RESP error strings in exactly one place,
// errors.go.
//
// It must not talk to a backend directly, nor keep lock state of its own:
// the engine owns locks, resp/ owns connections.
package commands
