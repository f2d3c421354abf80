package browser

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// chromium forks a zygote, renderers, a GPU and a network service
// process, and detaches two crash handlers (their parent is then init).
// Each names the browser's folder on its command line (--user-data-dir,
// the crash database under XDG_CONFIG_HOME): that finds them all. The
// forked ones rewrite their command line as one string (setproctitle), so
// the folder is looked for as a substring, not as a whole argument.

// Processes returns the pids of chromium's processes still alive: the main
// one, those it forked and its crash handlers. After Stop it is empty.
func (b *Browser) Processes() []int { return processesNaming(b.dir) }

// processesNaming returns the pids of the processes whose command line
// holds dir (a zombie's is empty: it holds nothing but its pid).
func processesNaming(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(dir + string(os.PathSeparator))
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmdline, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll kills (SIGKILL) the processes naming dir until none is left, or
// until timeout, and returns those still alive then. A process can fork
// as its parent dies, so it looks again after each kill.
func killAll(dir string, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		pids := processesNaming(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Memory is what chromium's processes hold in memory, in bytes, summed
// over them: RSS counts the pages they share once per process, PSS
// divides each shared page between its sharers (the fair total).
type Memory struct {
	Processes int
	RSS, PSS  int64
}

// Memory reads /proc/PID/smaps_rollup of each of chromium's processes.
func (b *Browser) Memory() Memory {
	var m Memory
	for _, pid := range b.Processes() {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
		if err != nil {
			continue // gone meanwhile
		}
		m.Processes++
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			name, value, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			var into *int64
			switch name {
			case "Rss":
				into = &m.RSS
			case "Pss":
				into = &m.PSS
			default:
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
			if err == nil {
				*into += kb << 10
			}
		}
		f.Close()
	}
	return m
}
