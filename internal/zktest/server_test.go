package zktest

import (
	"strings"
	"testing"
	"time"
)

func TestStandaloneServes(t *testing.T) {
	s := Start(t)
	if m, err := s.Mode(); m != "standalone" || err != nil {
		t.Fatalf("mode %q, %v", m, err)
	}
	if out, err := FourLetter(s.Addr(), "ruok"); out != "imok" || err != nil {
		t.Fatalf("ruok: %q, %v", out, err)
	}
}

func TestKillRestartPauseResume(t *testing.T) {
	s := Start(t)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := FourLetter(s.Addr(), "ruok"); err == nil {
		t.Fatal("a killed server still answers")
	}
	if err := s.Kill(); err != ErrNotRunning {
		t.Fatalf("second kill: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if out, _ := FourLetter(s.Addr(), "ruok"); out != "" {
		t.Fatalf("a paused server answered %q", out)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if out, err := FourLetter(s.Addr(), "ruok"); out != "imok" {
		t.Fatalf("after resume: %q, %v", out, err)
	}
}

// TestEnsembleElectsAgain: three servers elect one leader; when it is
// killed the other two elect another, and the old one rejoins as a
// follower.
func TestEnsembleElectsAgain(t *testing.T) {
	e := StartEnsemble(t, 3)
	if len(e.Addrs()) != 3 {
		t.Fatal(e.Addrs())
	}
	start := time.Now()
	leader, next, err := e.KillLeader()
	if err != nil || next == leader {
		t.Fatalf("new leader %v, %v", next, err)
	}
	t.Logf("new leader after %v", time.Since(start))
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	if m, _ := leader.Mode(); m != "follower" {
		t.Fatalf("the old leader rejoined as %q", m)
	}
	stat, _ := FourLetter(next.Addr(), "mntr")
	if !strings.Contains(stat, "zk_synced_followers\t2") {
		t.Errorf("leader does not count 2 synced followers:\n%s", stat)
	}
}

func TestParseMntr(t *testing.T) {
	m := parseMntr("zk_version\t3.8.0, built on x\nzk_packets_sent\t3\nzk_packets_received\t4\nnot a pair\n")
	if m["zk_packets_received"] != "4" || m["zk_packets_sent"] != "3" || m["zk_version"] != "3.8.0, built on x" || len(m) != 3 {
		t.Fatalf("parseMntr = %v", m)
	}
}
