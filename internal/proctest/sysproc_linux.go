package proctest

import "syscall"

// sysProcAttr makes the kernel kill the server if the test binary dies
// before it could stop it, so a crashed test leaves no stray servers.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
