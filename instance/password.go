package instance

import (
	"fmt"
	"os"
	"strings"

	"github.com/lockproxy/lockproxy/resp"
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
		return "", &StartError{Key: key, Err: err}
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", &StartError{Key: key, Err: fmt.Errorf("%s is empty: it would turn authentication off", file)}
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", &StartError{Key: key, Err: fmt.Errorf("%s holds more than one line", file)}
	}
	return s, nil
}

// users are the [[users]] entries as the RESP server checks them, with
// their passwords read.
func (c Config) users() ([]resp.User, error) {
	var out []resp.User
	for i, u := range c.Users {
		key := fmt.Sprintf("users[%d] (%s)", i, u.Name)
		pass, err := secret(key+".password_file", u.Password, u.PasswordFile)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.User{Name: u.Name, Password: pass, Keys: u.Keys,
			Native: u.Commands != "legacy", Legacy: u.Commands != "native"})
	}
	return out, nil
}

// validateUsers checks the [[users]] entries.
func (c Config) validateUsers() error {
	seen := map[string]bool{}
	for i, u := range c.Users {
		switch {
		case u.Name == "" || strings.ContainsAny(u.Name, " \t\r\n"):
			return fmt.Errorf("users[%d]: name %q must be non-empty, without spaces", i, u.Name)
		case u.Name == "default":
			return fmt.Errorf("users[%d]: \"default\" is the user of the password key; pick another name", i)
		case seen[u.Name]:
			return fmt.Errorf("users[%d]: user %q configured twice", i, u.Name)
		case (u.Password == "") == (u.PasswordFile == ""):
			return fmt.Errorf("users[%d] (%s): set exactly one of password and password_file", i, u.Name)
		case u.Commands != "" && u.Commands != "all" && u.Commands != "native" && u.Commands != "legacy":
			return fmt.Errorf("users[%d] (%s): commands %q: want native, legacy or all", i, u.Name, u.Commands)
		}
		seen[u.Name] = true
	}
	return nil
}
