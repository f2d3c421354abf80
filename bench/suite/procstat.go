package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is one unit of utime and stime in /proc/PID/stat: USER_HZ, what
// sysconf(_SC_CLK_TCK) returns, which is 100 on every Linux whatever the
// kernel's own HZ.
const clockTick = 10 * time.Millisecond

// procCPU returns the CPU time (user + system, all threads) process pid has
// used so far, from /proc/PID/stat, to the clock tick.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// or parentheses itself: the fields after the last ')' are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// servicePID reads the pid file that deploy/local writes for one of the
// local stack's servers (lib.sh's FG_RUN, service.sh's svc_pid) and checks
// that the process is alive and is comm, so that a stale file whose pid was
// reused does not count.
func servicePID(pidFile, comm string) (int, error) {
	path, err := filepath.Abs(pidFile)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w (is `make up` running?)", comm, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b))) // RabbitMQ's has no newline
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	got, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(got)) != comm {
		return 0, fmt.Errorf("%s: pid %d is not a running %s", path, pid, comm)
	}
	return pid, nil
}

// machineBusy returns the CPU time all the machine's CPUs together have
// spent busy so far, from the first line of /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal …: this
	// machine's work is user to softirq (guest time is already in user;
	// steal is the hypervisor's other guests).
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: %q", line)
	}
	var ticks int64
	for i, s := range f[1:8] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}
