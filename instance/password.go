package instance

import (
	"fmt"
	"os"
	"strings"
)

// clientPassword is the password clients must give: password, or the
// contents of password_file.
func (c Config) clientPassword() (string, error) {
	return secret("password_file", c.Password, c.PasswordFile)
}

// nodePassword is the Redis nodes' AUTH password.
func (c Config) nodePassword() (string, error) {
	return secret("redlock.password_file", c.Redlock.Password, c.Redlock.PasswordFile)
}

// secret is value, or the contents of file without its line ending. An
// empty file is an error: it would silently turn authentication off.
func secret(key, value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s %s is empty", key, file)
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("%s %s holds more than one line", key, file)
	}
	return s, nil
}
