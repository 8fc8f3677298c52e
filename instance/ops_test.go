package instance_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/instance"
	"go.uber.org/zap"
)

// TestPasswordFileMistakes: a password file that is missing, empty or
// holds several lines stops the start: an empty one would silently turn
// authentication off.
func TestPasswordFileMistakes(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"empty": "", "newline": "\n", "lines": "a\nb\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for file, want := range map[string]string{
		"missing": "no such file",
		"empty":   "is empty",
		"newline": "is empty",
		"lines":   "more than one line",
	} {
		cfg := instance.Default()
		cfg.Listen = "127.0.0.1:0"
		cfg.PasswordFile = filepath.Join(dir, file)
		if in, err := instance.Start(cfg, zap.NewNop()); err == nil || !strings.Contains(err.Error(), want) {
			if in != nil {
				in.Shutdown(t.Context())
			}
			t.Errorf("password_file %s: %v, want %q", file, err, want)
		}
	}
}

func TestWarnings(t *testing.T) {
	for nodes, want := range map[string]string{
		"a:1":             "1 redlock node(s)",
		"a:1,b:1":         "2 redlock node(s)",
		"a:1,b:1,c:1":     "",
		"a:1,b:1,c:1,d:1": "4 redlock nodes: an even number",
	} {
		cfg := instance.Default()
		cfg.Backend, cfg.Redlock.Nodes = "redlock", strings.Split(nodes, ",")
		got := strings.Join(cfg.Warnings(), ";")
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: warnings %q, want %q", nodes, got, want)
		}
	}
}
