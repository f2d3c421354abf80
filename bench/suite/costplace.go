package main

// Where the cost part's runs put their processes (cost.go). On two shared
// cores a figure moves by a third between runs; where the processes sit
// moves it too, so every figure is measured in a placement it names:
//
//   - pinned: the gateway, the consumers and the bare handler on CPU 0,
//     the load (this process) on CPU 1, as the rest of the suite measures
//     a server against the bare handler;
//   - unpinned: all of them on every CPU, where the scheduler puts them,
//     as a machine runs them without taskset.
//
// Redis, RabbitMQ and MariaDB are the shared servers of `make up`, which
// other users of this machine share: the suite leaves them on every CPU
// in both placements.

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// placement is where a cost run puts its processes.
type placement struct {
	name   string
	server string // the flashgate processes' and the bare handler's CPUs: cpuServer or cpuEvery
	load   string // this process's: "1", or cpuEvery
}

var (
	pinnedPlace   = placement{name: "pinned", server: cpuServer, load: "1"}
	unpinnedPlace = placement{name: "unpinned", server: cpuEvery, load: cpuEvery}
)

// what says where the placement puts the processes, for the report.
func (p placement) what() string {
	if p == pinnedPlace {
		return "gateway, consumers and the bare handler on CPU 0, the load on CPU 1 (taskset)"
	}
	return "gateway, consumers, the bare handler and the load on every CPU"
}

// parsePlacements reads -cost-placements: a comma-separated list of
// placement names, each once.
func parsePlacements(list string) ([]placement, error) {
	var out []placement
	for name := range strings.SplitSeq(list, ",") {
		var p placement
		switch strings.TrimSpace(name) {
		case pinnedPlace.name:
			p = pinnedPlace
		case unpinnedPlace.name:
			p = unpinnedPlace
		default:
			return nil, fmt.Errorf("-cost-placements %q: want pinned, unpinned or both, comma-separated", list)
		}
		for _, q := range out {
			if q == p {
				return nil, fmt.Errorf("-cost-placements %q: %s twice", list, p.name)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// canPin reports whether this machine can pin: taskset and two CPUs.
func canPin() bool {
	_, err := exec.LookPath("taskset")
	return err == nil && machineCPUs() > 1
}

// placeLoad moves every thread of this process, the load, onto cpus
// (taskset -a -p; cpuEvery: all the machine's) and its GOMAXPROCS with
// them, and returns the function that moves them back where they were.
// Without taskset it does nothing.
func placeLoad(cpus string) (restore func(), err error) {
	if _, err := exec.LookPath("taskset"); err != nil {
		return func() {}, nil
	}
	was, err := ownCPUs()
	if err != nil {
		return nil, err
	}
	if cpus == cpuEvery {
		cpus = fmt.Sprintf("0-%d", machineCPUs()-1)
	}
	if err := setOwnCPUs(cpus); err != nil {
		return nil, err
	}
	return func() {
		if err := setOwnCPUs(was); err != nil {
			fmt.Fprintf(os.Stderr, "the load's CPUs back to %s: %v\n", was, err)
		}
	}, nil
}

// ownCPUs is this process's CPU list (/proc/self/status, Cpus_allowed_list).
func ownCPUs() (string, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", err
	}
	if v := infoValue(string(b), "Cpus_allowed_list"); v != "" {
		return strings.TrimSpace(v), nil
	}
	return "", fmt.Errorf("/proc/self/status: no Cpus_allowed_list")
}

// setOwnCPUs puts every thread of this process on cpus (a thread started
// later inherits its starter's) and GOMAXPROCS to as many, as Go sets it
// at start. Twice: a thread started while taskset went through the others
// may have inherited the old list.
func setOwnCPUs(cpus string) error {
	for range 2 {
		if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
			return fmt.Errorf("taskset -a -p -c %s: %v: %s", cpus, err, out)
		}
	}
	runtime.SetDefaultGOMAXPROCS()
	return nil
}
