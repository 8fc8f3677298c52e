package luascript

// Test-only API.

// Catalog lists every known script, in a fixed order.
func Catalog() []*Script {
	return append([]*Script(nil), catalog...)
}
